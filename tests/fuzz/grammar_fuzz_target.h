// What the grammar fuzzers share: a compiled grammar run through the
// matcher on a byte vocabulary plus a few multi-byte tokens, fed the
// input's own bytes, each step's mask checked against the step it allows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/grammar/grammar.h"
#include "model/grammar/matcher.h"

namespace attn::grammar {

inline std::shared_ptr<const TokenTrie> FuzzVocabulary() {
  static const auto trie = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    for (const char* piece : {"{\"", "\":", "true", "null", "12", "\xC3\xA9", "\xE2\x82", "ab"}) {
      tokens.emplace_back(piece);
    }
    return std::make_shared<const TokenTrie>(tokens);
  }();
  return trie;
}

// Feeds `text`, token by token where the mask allows it; a token the mask
// allows must be accepted, one it refuses must be refused.
inline void RunMatcher(const Grammar& grammar, const std::string& text) {
  auto trie = FuzzVocabulary();
  GrammarMatcher matcher(std::make_shared<const Grammar>(grammar), trie);
  for (size_t at = 0; at < text.size() && at < 64; ++at) {
    const TokenMask& mask = matcher.Mask();
    const auto id = static_cast<uint8_t>(text[at]);
    const bool allowed = MaskAllows(mask, id);
    GrammarMatcher probe = matcher;
    if (probe.Accept(trie->token(id)) != allowed) __builtin_trap();
    if (!allowed) return;
    matcher.Accept(trie->token(id));
  }
}

}  // namespace attn::grammar
