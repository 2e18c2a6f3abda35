#include "model/lm/continuation.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace attn {

Continuation::Continuation(const Tokenizer& tokenizer, const std::vector<int64_t>& prompt,
                           ContinuationOptions options)
    : tokenizer_(tokenizer),
      options_(std::move(options)),
      prompt_tokens_(static_cast<int64_t>(prompt.size())),
      sampler_(options_.sampling, prompt),
      text_(tokenizer, options_.stop) {
  if (options_.grammar && options_.grammar_tokens) {
    matcher_ = std::make_unique<grammar::GrammarMatcher>(options_.grammar, options_.grammar_tokens);
    matcher_->Prefetch();  // the first mask, during the prompt's prefill
  }
}

SampledToken Continuation::Sample(const float* logits, int64_t vocab) {
  if (!matcher_) return sampler_.Next(logits, vocab, tokenizer_.text_vocab_size());
  const auto start = std::chrono::steady_clock::now();
  const grammar::TokenMask& mask = matcher_->Mask();
  const bool any = std::any_of(mask.begin(), mask.end(), [](uint64_t word) { return word != 0; });
  const std::vector<uint64_t>* allowed = &mask;
  // The end of the sequence where the text is whole; and where no token can
  // go on (a vocabulary without the bytes the grammar needs), as the way out.
  // Only then is the mask copied (the sampler takes ids past it as refused).
  if (matcher_->CanEnd() || !any) {
    allowed_ = mask;
    allowed_.resize(std::max<size_t>(allowed_.size(), (vocab + 63) / 64), 0);
    std::vector<int64_t> ends = options_.stop_token_ids;
    ends.push_back(tokenizer_.eos_id());
    for (int64_t id : ends) {
      if (id >= 0 && id < vocab) allowed_[id >> 6] |= uint64_t{1} << (id & 63);
    }
    allowed = &allowed_;
  }
  mask_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return sampler_.Next(logits, vocab, tokenizer_.text_vocab_size(), allowed);
}

AcceptedToken Continuation::Accept(int64_t id) {
  AcceptedToken accepted;
  ++generated_;
  const bool is_eos = id == tokenizer_.eos_id() ||
                      std::find(options_.stop_token_ids.begin(), options_.stop_token_ids.end(),
                                id) != options_.stop_token_ids.end();
  if (!is_eos) accepted.text = text_.Push(id);
  // The grammar took a sampled token's bytes (Sample allowed them); it ends
  // the sequence once it admits nothing more.
  bool grammar_done = false;
  if (matcher_ && !is_eos) {
    matcher_->Accept(tokenizer_.TokenBytes(id));
    grammar_done = matcher_->CanEnd() && !matcher_->CanContinue();
  }
  const int64_t length = prompt_tokens_ + generated_;
  if (text_.stopped() || grammar_done) {
    accepted.finish_reason = FinishReason::kStop;
  } else if (is_eos && !options_.ignore_eos) {
    accepted.finish_reason = FinishReason::kEos;
  } else if (generated_ >= options_.max_tokens ||
             (options_.context_limit > 0 && length >= options_.context_limit)) {
    accepted.finish_reason = FinishReason::kLength;
  }
  if (accepted.finish_reason == FinishReason::kUnspecified) {
    // The next mask, while the model computes the next logits.
    if (matcher_) matcher_->Prefetch();
    return accepted;
  }
  finished_ = true;
  // A stop string ends the text where it starts: nothing held back follows.
  // A finished grammar ends it after the whole text.
  if (accepted.finish_reason != FinishReason::kStop || !text_.stopped()) {
    accepted.text += text_.Finish();
  }
  return accepted;
}

}  // namespace attn
