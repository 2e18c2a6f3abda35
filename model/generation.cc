#include "model/generation.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"

namespace attn {
namespace {

absl::Status CheckRequest(const CausalLm& model, const std::vector<int64_t>& prompt,
                          const GenerationOptions& options) {
  if (prompt.empty()) return absl::InvalidArgumentError("prompt is empty");
  const int64_t vocab = model->config().vocab_size;
  for (int64_t id : prompt) {
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt token ", id, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  if (options.max_tokens < 1) return absl::InvalidArgumentError("max_tokens must be >= 1");
  const int64_t limit = model->max_context();
  if (limit >= 0 && static_cast<int64_t>(prompt.size()) + options.max_tokens > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt (", prompt.size(), " tokens) plus max_tokens (", options.max_tokens,
                     ") exceeds the model's context of ", limit, " tokens"));
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
  Sampler sampler(options.sampling, prompt);
  IncrementalDecoder decoder(tokenizer, /*continues_text=*/true);
  GenerationResult result;
  for (int64_t n = 0; n < options.max_tokens; ++n) {
    auto row = logits.to(torch::kFloat).contiguous();
    GeneratedPiece piece;
    piece.token = sampler.Next(row.data_ptr<float>(), row.numel());
    if (options.stop_at_eos && piece.token.id == tokenizer.eos_id()) {
      result.finish_reason = FinishReason::kEos;
      break;
    }
    piece.text = decoder.Push(piece.token.id);
    result.tokens.push_back(piece.token.id);
    result.text += piece.text;
    if (on_piece) on_piece(piece);
    if (n + 1 < options.max_tokens) {
      logits = model->step(torch::tensor({piece.token.id}, torch::kLong), {}, state)[0];
    }
  }
  result.text += decoder.Finish();
  return result;
}

}  // namespace attn
