#include "model/lm/continuation.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "model/grammar/constraint.h"
#include "tests/tiny_tokenizer.h"

namespace attn {
namespace {

using testing::TinyTokenizer;

// A token id that is not the end of sequence.
int64_t Word(const char* text) {
  const auto ids = TinyTokenizer().Encode(text);
  EXPECT_FALSE(ids.empty());
  return ids.front();
}

ContinuationOptions WithMaxTokens(int64_t max_tokens) {
  ContinuationOptions options;
  options.max_tokens = max_tokens;
  return options;
}

TEST(Continuation, EndsAtMaxTokensWithTheHeldTextReleased) {
  Continuation continuation(TinyTokenizer(), {Word("the")}, WithMaxTokens(3));
  const int64_t river = Word("river");
  std::string text;
  for (int i = 0; i < 2; ++i) {
    const AcceptedToken accepted = continuation.Accept(river);
    EXPECT_EQ(accepted.finish_reason, FinishReason::kUnspecified);
    text += accepted.text;
  }
  const AcceptedToken last = continuation.Accept(river);
  EXPECT_EQ(last.finish_reason, FinishReason::kLength);
  EXPECT_TRUE(continuation.finished());
  EXPECT_EQ(continuation.generated(), 3);
  text += last.text;
  EXPECT_EQ(text, TinyTokenizer()
                      .Decode({Word("the"), river, river, river})
                      .substr(TinyTokenizer().Decode({Word("the")}).size()));
}

TEST(Continuation, EosEndsWithoutTextUnlessIgnored) {
  const int64_t eos = TinyTokenizer().eos_id();
  Continuation stops(TinyTokenizer(), {Word("the")}, WithMaxTokens(10));
  const AcceptedToken ended = stops.Accept(eos);
  EXPECT_EQ(ended.finish_reason, FinishReason::kEos);
  EXPECT_EQ(ended.text, "");

  ContinuationOptions options = WithMaxTokens(10);
  options.ignore_eos = true;
  Continuation ignores(TinyTokenizer(), {Word("the")}, options);
  const AcceptedToken goes_on = ignores.Accept(eos);
  EXPECT_EQ(goes_on.finish_reason, FinishReason::kUnspecified);
  EXPECT_EQ(goes_on.text, "");  // the end-of-sequence token never has text
  EXPECT_FALSE(ignores.finished());
}

TEST(Continuation, TheModelsContextEndsTheSequence) {
  ContinuationOptions options = WithMaxTokens(100);
  options.context_limit = 7;
  const std::vector<int64_t> prompt(5, Word("the"));
  Continuation continuation(TinyTokenizer(), prompt, options);
  EXPECT_EQ(continuation.Accept(Word("river")).finish_reason, FinishReason::kUnspecified);
  EXPECT_EQ(continuation.Accept(Word("river")).finish_reason, FinishReason::kLength);
}

TEST(Continuation, AStopStringEndsTheTextBeforeIt) {
  ContinuationOptions options = WithMaxTokens(100);
  options.stop = {"stop"};
  Continuation continuation(TinyTokenizer(), {Word("the")}, options);
  std::string text;
  FinishReason reason = FinishReason::kUnspecified;
  for (int64_t id : TinyTokenizer().Encode(" river stop here")) {
    const AcceptedToken accepted = continuation.Accept(id);
    text += accepted.text;
    reason = accepted.finish_reason;
    if (continuation.finished()) break;
  }
  EXPECT_EQ(reason, FinishReason::kStop);
  EXPECT_EQ(text.find("stop"), std::string::npos) << text;
  EXPECT_NE(text.find("river"), std::string::npos) << text;
}

TEST(Continuation, GreedySamplingTakesTheLargestLogit) {
  ContinuationOptions options = WithMaxTokens(4);
  options.sampling.temperature = 0.0;
  Continuation continuation(TinyTokenizer(), {Word("the")}, options);
  const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 2.9f};
  EXPECT_EQ(continuation.Sample(logits.data(), 4).id, 1);
}

// Structured output: sampled at temperature 1 from random logits, every
// sequence is a sentence of the grammar, ends when nothing may follow, and
// samples eos only where the text is whole.
TEST(Continuation, AGrammarShapesEverySequence) {
  const Tokenizer& tokenizer = TinyTokenizer();
  auto grammar = grammar::GrammarCache::Shared().Get(
      grammar::OutputConstraint::Regex("(the|river|[a-z]{1,3})( (the|river|[a-z]{1,3})){0,3}!?"));
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  auto tokens = GrammarVocabulary(tokenizer);
  const int64_t vocab = tokenizer.vocab_size();
  std::mt19937 rng(7);
  std::normal_distribution<float> noise(0.0f, 3.0f);
  for (uint64_t seed = 0; seed < 40; ++seed) {
    ContinuationOptions options = WithMaxTokens(64);
    options.sampling.seed = seed;
    options.grammar = *grammar;
    options.grammar_tokens = tokens;
    Continuation continuation(tokenizer, {Word("the")}, options);
    std::string text;
    std::vector<float> logits(vocab);
    while (!continuation.finished()) {
      for (auto& l : logits) l = noise(rng);
      logits[tokenizer.eos_id()] += 4.0f;  // eos is likely wherever it is allowed
      const SampledToken token = continuation.Sample(logits.data(), vocab);
      EXPECT_LT(token.logprob, 0.0);
      const AcceptedToken accepted = continuation.Accept(token.id);
      text += accepted.text;
      if (accepted.finish_reason != FinishReason::kUnspecified) {
        EXPECT_NE(accepted.finish_reason, FinishReason::kLength) << text;
      }
    }
    grammar::GrammarMatcher check(*grammar, tokens);
    EXPECT_TRUE(check.Accept(text) && check.CanEnd()) << "seed " << seed << ": \"" << text << "\"";
  }
}

TEST(FinishReason, Names) {
  EXPECT_STREQ(FinishReasonName(FinishReason::kLength), "length");
  EXPECT_STREQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_STREQ(FinishReasonName(FinishReason::kEos), "eos");
  EXPECT_STREQ(FinishReasonName(FinishReason::kUnspecified), "");
}

}  // namespace
}  // namespace attn
