#include "model/lm/continuation.h"

#include <algorithm>
#include <utility>

namespace attn {

Continuation::Continuation(const Tokenizer& tokenizer, const std::vector<int64_t>& prompt,
                           ContinuationOptions options)
    : tokenizer_(tokenizer),
      options_(std::move(options)),
      prompt_tokens_(static_cast<int64_t>(prompt.size())),
      sampler_(options_.sampling, prompt),
      text_(tokenizer, options_.stop) {}

AcceptedToken Continuation::Accept(int64_t id) {
  AcceptedToken accepted;
  ++generated_;
  const bool is_eos = id == tokenizer_.eos_id() ||
                      std::find(options_.stop_token_ids.begin(), options_.stop_token_ids.end(),
                                id) != options_.stop_token_ids.end();
  if (!is_eos) accepted.text = text_.Push(id);
  const int64_t length = prompt_tokens_ + generated_;
  if (text_.stopped()) {
    accepted.finish_reason = FinishReason::kStop;
  } else if (is_eos && !options_.ignore_eos) {
    accepted.finish_reason = FinishReason::kEos;
  } else if (generated_ >= options_.max_tokens ||
             (options_.context_limit > 0 && length >= options_.context_limit)) {
    accepted.finish_reason = FinishReason::kLength;
  }
  if (accepted.finish_reason == FinishReason::kUnspecified) return accepted;
  finished_ = true;
  // A stop string ends the text where it starts: nothing held back follows.
  if (accepted.finish_reason != FinishReason::kStop) accepted.text += text_.Finish();
  return accepted;
}

}  // namespace attn
