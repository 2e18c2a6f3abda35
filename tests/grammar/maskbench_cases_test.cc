// Real JSON Schemas with real instances (tests/data/schemas: MaskBench case
// files, tests/data/schemas/SOURCES.tsv) through a real tokenizer
// (GPT-NeoX-20B's tokenizer.json): every valid instance's tokens are
// allowed step by step and end where the grammar may end; every invalid
// one is refused somewhere.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "model/grammar/constraint.h"
#include "model/grammar/matcher.h"
#include "model/text/grammar_vocabulary.h"
#include "model/text/tokenizer.h"

namespace attn::grammar {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool Accepts(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const TokenTrie>& trie,
             const std::vector<int64_t>& tokens) {
  GrammarMatcher matcher(g, trie);
  for (int64_t id : tokens) {
    if (!MaskAllows(matcher.Mask(), id) || !matcher.Accept(trie->token(id))) return false;
  }
  return matcher.CanEnd();
}

TEST(MaskBenchCases, ValidAcceptedInvalidRefused) {
  const std::string dir = std::string(ATTN_SOURCE_DIR) + "/tests/data/schemas";
  auto tokenizer = Tokenizer::FromTokenizerJson(ReadFile(
      std::string(ATTN_SOURCE_DIR) + "/tests/data/tokenizers/gpt-neox-20b/tokenizer.json"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto trie = GrammarVocabulary(*tokenizer);
  int cases = 0, valid = 0, invalid = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    const auto c = nlohmann::ordered_json::parse(ReadFile(entry.path().string()));
    auto grammar = GrammarCache::Shared().Get(OutputConstraint::JsonSchema(c["schema"]));
    ASSERT_TRUE(grammar.ok()) << entry.path().filename() << ": " << grammar.status();
    ++cases;
    for (const auto& test : c["tests"]) {
      const bool expected = test["valid"].get<bool>();
      const std::string text = test["data"].dump();
      EXPECT_EQ(Accepts(*grammar, trie, tokenizer->Encode(text)), expected)
          << entry.path().filename() << ": " << text;
      ++(expected ? valid : invalid);
    }
  }
  EXPECT_EQ(cases, 13);
  EXPECT_GE(valid, 13);
  EXPECT_GE(invalid, 20);
}

}  // namespace
}  // namespace attn::grammar
