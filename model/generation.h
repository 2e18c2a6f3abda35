// Generating a continuation of one prompt with the recurrent forms: the
// prompt is prefilled in chunks (the parallel form), then each new token is
// one step() on the sequence's state. Text comes out through an
// IncrementalDecoder, so no piece ends inside a UTF-8 character.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/language_model.h"
#include "model/sampling.h"
#include "model/tokenizer.h"

namespace attn {

struct GenerationOptions {
  int64_t max_tokens = 128;
  int64_t prefill_chunk = 256;
  bool stop_at_eos = true;
  SamplingOptions sampling;
};

struct GeneratedPiece {
  SampledToken token;
  std::string text;  // what the token completes of the text (may be empty)
};

enum class FinishReason { kLength, kEos };

struct GenerationResult {
  std::vector<int64_t> tokens;
  std::string text;  // Decode(prompt + tokens) minus Decode(prompt)
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
