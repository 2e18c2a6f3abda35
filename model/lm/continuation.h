// What happens to each token a language model generates, shared by every
// generation loop (the serving engine, offline generation): sampling it,
// turning it into text, and deciding whether the sequence ends with it.
//
// A sequence ends, in this order of precedence, when
//   kStop    its text completes one of the stop strings (the text before
//            the stop string is the last released), or its grammar is
//            complete and admits nothing more;
//   kEos     it chose the end-of-sequence token (unless eos is ignored);
//   kLength  it has max_tokens tokens, or prompt + generated tokens reach
//            the model's context limit.
// The end-of-sequence token is a token of the sequence but never has text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/grammar/grammar.h"
#include "model/grammar/matcher.h"
#include "model/lm/finish_reason.h"
#include "model/lm/sampling.h"
#include "model/text/grammar_vocabulary.h"
#include "model/text/text_assembler.h"
#include "model/text/tokenizer.h"

namespace attn {

// Tokens a generation makes when its request does not say: the one default
// behind the server's RequestLimits::default_max_tokens (--default_max_tokens)
// and attn-generate's --max_tokens.
inline constexpr int64_t kDefaultMaxTokens = 128;

struct ContinuationOptions {
  int64_t max_tokens = 0;         // at least 1: every caller sets it
  std::vector<std::string> stop;  // non-empty UTF-8 strings
  bool ignore_eos = false;        // true: eos is an ordinary token
  // Ids that end the sequence as eos does (a chat template's end of turn,
  // when it is not the tokenizer's eos); ignore_eos covers them too.
  std::vector<int64_t> stop_token_ids;
  int64_t context_limit = -1;  // the model's max_context(); -1: unbounded
  SamplingOptions sampling;
  // Structured output: the grammar the generated text must follow, and the
  // vocabulary's bytes (GrammarVocabulary of the same tokenizer). Each step
  // samples only tokens that keep the text a prefix of a sentence; eos (and
  // stop_token_ids) only where the text is a whole sentence; and the
  // sequence ends once the grammar admits nothing more.
  std::shared_ptr<const grammar::Grammar> grammar;
  std::shared_ptr<const grammar::TokenTrie> grammar_tokens;
};

// What Accept() made of one token.
struct AcceptedToken {
  std::string text;  // the text it releases (whole characters; may be empty)
  FinishReason finish_reason = FinishReason::kUnspecified;  // set when it ends the sequence
};

class Continuation {
 public:
  // `tokenizer` must outlive the continuation. `prompt`: the ids the
  // sequence starts with (the repetition penalty counts them).
  Continuation(const Tokenizer& tokenizer, const std::vector<int64_t>& prompt,
               ContinuationOptions options);

  // Chooses the next token from the model's [vocab] logits, among the ids
  // the tokenizer has (an embedding padded past them never yields its
  // extra rows; log-probabilities stay the model's over all of them), and
  // with a grammar among those it allows (log-probabilities then of the
  // masked distribution). Touches only this continuation: continuations of
  // different sequences may sample concurrently.
  SampledToken Sample(const float* logits, int64_t vocab);

  // Adds a sampled token to the sequence: its text, and whether it ends it.
  // When it does, the returned text includes whatever was held back.
  AcceptedToken Accept(int64_t id);

  int64_t generated() const { return generated_; }
  // The time Sample spent on the grammar's mask since the last call.
  double TakeMaskSeconds() { return std::exchange(mask_seconds_, 0.0); }
  bool finished() const { return finished_; }

 private:
  const Tokenizer& tokenizer_;
  const ContinuationOptions options_;
  const int64_t prompt_tokens_;
  Sampler sampler_;
  TextAssembler text_;
  std::unique_ptr<grammar::GrammarMatcher> matcher_;  // structured output
  std::vector<uint64_t> allowed_;  // the matcher's mask plus end ids, where they are allowed
  double mask_seconds_ = 0.0;
  int64_t generated_ = 0;
  bool finished_ = false;
};

}  // namespace attn
