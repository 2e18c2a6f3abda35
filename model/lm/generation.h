// Generating a continuation of one prompt offline, with the recurrent forms:
// the prompt is prefilled in chunks (the parallel form), then each new token
// is one step() on the sequence's state. Each token goes through the same
// Continuation as the serving engine's (model/lm/continuation.h): the same
// sampling, text and finish rules, so offline and served output agree.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/lm/continuation.h"
#include "model/lm/finish_reason.h"
#include "model/lm/language_model.h"
#include "model/lm/sampling.h"
#include "model/text/tokenizer.h"

namespace attn {

struct GenerationOptions {
  int64_t max_tokens = kDefaultMaxTokens;
  int64_t prefill_chunk = 256;
  bool stop_at_eos = true;
  std::vector<std::string> stop;  // stop strings (Continuation)
  SamplingOptions sampling;
};

struct GeneratedPiece {
  SampledToken token;
  std::string text;  // what the token completes of the text (may be empty)
};

struct GenerationResult {
  std::vector<int64_t> tokens;  // without a final end-of-sequence token
  std::string text;             // Decode(prompt + tokens) minus Decode(prompt)
  FinishReason finish_reason = FinishReason::kLength;
};

// Generates after `prompt` (token ids, at least one); calls `on_piece` for
// every token as it is chosen. kInvalidArgument for an empty or out-of-
// vocabulary prompt, bad sampling options, or a prompt plus max_tokens past
// the model's context.
absl::StatusOr<GenerationResult> Generate(
    CausalLm& model, const Tokenizer& tokenizer, const std::vector<int64_t>& prompt,
    const GenerationOptions& options,
    const std::function<void(const GeneratedPiece&)>& on_piece = nullptr);

}  // namespace attn
