#include "model/lm/generation.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "model/lm/continuation.h"
#include "util/field_error.h"

namespace attn {
namespace {

absl::Status CheckRequest(const CausalLm& model, const std::vector<int64_t>& prompt,
                          const GenerationOptions& options) {
  if (prompt.empty()) return InvalidField("prompt", "is empty");
  const int64_t vocab = model->config().vocab_size;
  for (int64_t id : prompt) {
    if (id < 0 || id >= vocab) {
      return InvalidField("prompt", "token ", id, " is outside the vocabulary [0, ", vocab, ")");
    }
  }
  if (options.max_tokens < 1) return InvalidField("max_tokens", "must be at least 1");
  const int64_t limit = model->max_context();
  if (limit >= 0 && static_cast<int64_t>(prompt.size()) + options.max_tokens > limit) {
    return InvalidField("max_tokens", options.max_tokens, " plus the prompt's ", prompt.size(),
                        " tokens exceeds the model's context of ", limit, " tokens");
  }
  return options.sampling.Validate();
}

}  // namespace

absl::StatusOr<GenerationResult> Generate(
    CausalLm& model, const Tokenizer& tokenizer, const std::vector<int64_t>& prompt,
    const GenerationOptions& options, const std::function<void(const GeneratedPiece&)>& on_piece) {
  if (auto status = CheckRequest(model, prompt, options); !status.ok()) return status;
  c10::InferenceMode inference;
  auto state = model->initial_state(1, torch::kCPU);
  auto prompt_tensor = torch::tensor(prompt, torch::kLong).unsqueeze(0);
  torch::Tensor logits;
  for (int64_t start = 0; start < prompt_tensor.size(1); start += options.prefill_chunk) {
    const int64_t length = std::min(options.prefill_chunk, prompt_tensor.size(1) - start);
    const bool last_chunk = start + length == prompt_tensor.size(1);
    auto chunk_logits = model->prefill(prompt_tensor.narrow(1, start, length), state, {},
                                       last_chunk ? PrefillLogits::kLast : PrefillLogits::kNone);
    if (last_chunk) logits = chunk_logits[0][0];
  }
  ContinuationOptions continuation_options;
  continuation_options.max_tokens = options.max_tokens;
  continuation_options.stop = options.stop;
  continuation_options.ignore_eos = !options.stop_at_eos;
  continuation_options.context_limit = model->max_context();
  continuation_options.sampling = options.sampling;
  Continuation continuation(tokenizer, prompt, std::move(continuation_options));
  GenerationResult result;
  while (true) {
    auto row = logits.to(torch::kFloat).contiguous();
    GeneratedPiece piece;
    piece.token = continuation.Sample(row.data_ptr<float>(), row.numel());
    AcceptedToken accepted = continuation.Accept(piece.token.id);
    result.finish_reason = accepted.finish_reason;
    if (accepted.finish_reason == FinishReason::kEos) {
      result.text += accepted.text;  // what the end releases of held-back text
      break;
    }
    piece.text = std::move(accepted.text);
    result.tokens.push_back(piece.token.id);
    result.text += piece.text;
    if (on_piece) on_piece(piece);
    if (continuation.finished()) break;
    logits = model->step(torch::tensor({piece.token.id}, torch::kLong), {}, state)[0];
  }
  return result;
}

}  // namespace attn
