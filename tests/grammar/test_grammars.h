// Helpers of the grammar tests: schemas compiled through the shared cache,
// and whole texts fed byte by byte.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "model/grammar/constraint.h"
#include "model/grammar/matcher.h"

namespace attn::grammar::testing {

// A vocabulary of the 256 single bytes.
inline std::shared_ptr<const TokenTrie> Bytes() {
  static const auto* trie = new std::shared_ptr<const TokenTrie>([] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    return std::make_shared<const TokenTrie>(tokens);
  }());
  return *trie;
}

// Whether the grammar accepts `text` whole.
inline bool Accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g, Bytes());
  return m.Accept(text) && m.CanEnd();
}

inline std::shared_ptr<const Grammar> Compile(const OutputConstraint& c) {
  auto g = GrammarCache::Shared().Get(c);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : nullptr;
}

// A JSON Schema's grammar, compact (ws = 0) unless told.
inline std::shared_ptr<const Grammar> Schema(const char* text, int ws = 0) {
  OutputConstraint c = OutputConstraint::JsonSchema(nlohmann::ordered_json::parse(text));
  c.max_whitespace = ws;
  return Compile(c);
}

}  // namespace attn::grammar::testing
