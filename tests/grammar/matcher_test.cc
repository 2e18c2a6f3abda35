// The matcher against the Earley reference: at every step of random walks
// through small grammars, a token is allowed iff the text so far plus its
// bytes can still become a sentence, and the end iff the text is one.
#include "model/grammar/matcher.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "model/grammar/constraint.h"
#include "model/grammar/grammar.h"
#include "tests/grammar/earley_reference.h"

namespace attn::grammar {
namespace {

// Every byte alone, common multi-byte pieces, a UTF-8 character split
// across tokens, and pieces that cross grammar boundaries.
std::vector<std::string> SmallVocabulary() {
  std::vector<std::string> tokens{""};  // id 0: a control token, never allowed
  for (int b = 1; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (const char* piece :
       {"{\"", "\":", "\",\"", "\"}", "true", "false", "null", "12", "-0", "0.5", "e+", "ab", "abc",
        "ba", "((", "))", "()", "+1", "1+", "\xC3", "\xA9", "\xC3\xA9", "\xE2\x82", "\xAC",
        "\xE2\x82\xAC", "\xF0\x9F\x98\x80", " ", "  ", "\n", ", ", "\":\"", "[1", "],", "]}",
        "\"a\"", "xyz", "2024-", "01-", "T12:",
        // Longer than the steps a mask takes uniformly.
        "abababababababababab", "                    ", "a\"bcdefghijklmnopqrstuvwxyz", "na",
        "name\":"}) {
    tokens.emplace_back(piece);
  }
  return tokens;
}

const char* const kGrammars[] = {
    // Arithmetic with nesting.
    R"g(root ::= expr
expr ::= term ( [-+] term )*
term ::= num | "(" expr ")"
num ::= [0-9]+)g",
    // Unicode classes and negation.
    R"(root ::= "\"" [^"\\]* "\"" | [a-c\u00E9\u20AC]{2,4})",
    // Bounded and optional repetition, empty alternatives.
    R"(root ::= "a"{1,3} b? "c"* | ""
b ::= "b" | "ba")",
    // Ambiguity: two ways to the same text.
    R"(root ::= x x
x ::= "a"* | "ab")",
};

struct WalkStats {
  int steps = 0, allowed = 0;
};

void Walk(const std::shared_ptr<const Grammar>& grammar,
          const std::shared_ptr<const TokenTrie>& trie, uint64_t seed, WalkStats* stats) {
  testing::EarleyReference reference(*grammar);
  GrammarMatcher matcher(grammar, trie);
  std::mt19937_64 rng(seed);
  std::string text;
  for (int step = 0; step < 24; ++step) {
    const TokenMask& mask = matcher.Mask();
    std::vector<int64_t> allowed;
    for (int64_t id = 0; id < trie->vocab_size(); ++id) {
      bool viable = false, complete = false;
      if (!trie->token(id).empty()) reference.Check(text + trie->token(id), &viable, &complete);
      ASSERT_EQ(MaskAllows(mask, id), viable)
          << "token " << id << " after \"" << text << "\" (seed " << seed << ")";
      if (viable) allowed.push_back(id);
    }
    bool viable = false, complete = false;
    reference.Check(text, &viable, &complete);
    ASSERT_TRUE(viable);
    ASSERT_EQ(matcher.CanEnd(), complete) << "after \"" << text << "\"";
    ++stats->steps;
    stats->allowed += static_cast<int>(allowed.size());
    if (allowed.empty()) {
      ASSERT_FALSE(matcher.CanContinue() && !complete);
      return;
    }
    const int64_t id = allowed[rng() % allowed.size()];
    ASSERT_TRUE(matcher.Accept(trie->token(id)));
    text += trie->token(id);
  }
}

TEST(GrammarMatcher, AgreesWithEarleyOnRandomWalks) {
  auto trie = std::make_shared<const TokenTrie>(SmallVocabulary());
  for (const char* text : kGrammars) {
    auto grammar = Grammar::FromGbnf(text);
    ASSERT_TRUE(grammar.ok()) << grammar.status() << "\n" << text;
    auto shared = std::make_shared<const Grammar>(*std::move(grammar));
    WalkStats stats;
    for (uint64_t seed = 1; seed <= 12; ++seed) Walk(shared, trie, seed, &stats);
    EXPECT_GT(stats.steps, 12) << text;
    EXPECT_GT(stats.allowed, stats.steps) << text;  // the walks saw real choices
  }
}

TEST(GrammarMatcher, AgreesWithEarleyOnJsonSchemas) {
  auto trie = std::make_shared<const TokenTrie>(SmallVocabulary());
  const char* const schemas[] = {
      R"({"type":"object","properties":{"a":{"type":"integer","minimum":-5,"maximum":120},
          "b":{"enum":["x",true,null]},"c":{"type":"array","items":{"type":"number"},"maxItems":2}},
          "required":["b"],"additionalProperties":false})",
      R"({"type":"string","format":"date-time"})",
      R"({"$defs":{"n":{"type":"object","properties":{"k":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"})",
      // Bounded strings, undeclared keys, excluded strings.
      R"({"type":"array","items":{"type":"string","maxLength":22},"maxItems":3})",
      R"({"type":"object","properties":{"name":{"type":"string"},"nab":{"const":1}}})",
      R"({"type":"string","not":{"enum":["ab","abc"]}})",
  };
  for (const char* text : schemas) {
    OutputConstraint c = OutputConstraint::JsonSchema(nlohmann::ordered_json::parse(text));
    c.max_whitespace = 1;
    auto grammar = GrammarCache::Shared().Get(c);
    ASSERT_TRUE(grammar.ok()) << grammar.status() << "\n" << text;
    WalkStats stats;
    for (uint64_t seed = 1; seed <= 6; ++seed) Walk(*grammar, trie, seed, &stats);
    EXPECT_GT(stats.steps, 6) << text;
  }
}

// Matchers of one grammar share one automaton, on any thread: walks on
// eight threads at once see the masks that walks on an automaton of their
// own (another vocabulary object) see.
TEST(GrammarMatcher, SharedAutomatonAcrossThreads) {
  auto trie = std::make_shared<const TokenTrie>(SmallVocabulary());
  auto other = std::make_shared<const TokenTrie>(SmallVocabulary());
  auto grammar = GrammarCache::Shared().Get(OutputConstraint::JsonSchema(nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"a":{"type":"string","maxLength":30},"b":{"type":"integer"}}})")));
  ASSERT_TRUE(grammar.ok());
  auto walk = [&](uint64_t seed, const std::shared_ptr<const TokenTrie>& vocabulary) {
    std::vector<TokenMask> masks;
    GrammarMatcher matcher(*grammar, vocabulary);
    std::mt19937_64 rng(seed);
    for (int step = 0; step < 40; ++step) {
      masks.push_back(matcher.Mask());
      std::vector<int64_t> allowed;
      for (int64_t id = 0; id < trie->vocab_size(); ++id) {
        if (MaskAllows(masks.back(), id)) allowed.push_back(id);
      }
      if (allowed.empty()) break;
      matcher.Accept(trie->token(allowed[rng() % allowed.size()]));
    }
    return masks;
  };
  std::vector<std::vector<TokenMask>> threaded(8);
  std::vector<std::thread> threads;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    threads.emplace_back([&, seed] { threaded[seed] = walk(seed, trie); });
  }
  for (auto& t : threads) t.join();
  for (uint64_t seed = 0; seed < 8; ++seed) {
    EXPECT_EQ(threaded[seed], walk(seed, other)) << "seed " << seed;
    EXPECT_GT(threaded[seed].size(), 3u);
  }
}

TEST(GrammarMatcher, RepetitionKeepsStacksFlat) {
  auto grammar =
      std::make_shared<const Grammar>(*Grammar::FromGbnf(R"(root ::= "\"" [a-z]* "\"")"));
  auto trie = std::make_shared<const TokenTrie>(SmallVocabulary());
  GrammarMatcher matcher(grammar, trie);
  ASSERT_TRUE(matcher.Accept("\""));
  (void)matcher.Mask();
  const size_t after_one = matcher.interned();
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(matcher.Accept("ab"));
  (void)matcher.Mask();
  EXPECT_EQ(matcher.interned(), after_one);  // the same state and mask again
  EXPECT_FALSE(matcher.CanEnd());
  ASSERT_TRUE(matcher.Accept("\""));
  EXPECT_TRUE(matcher.CanEnd());
  EXPECT_FALSE(matcher.CanContinue());
  EXPECT_FALSE(matcher.Accept("a"));
}

}  // namespace
}  // namespace attn::grammar
