// The RWKV World vocabulary (rwkv_vocab_v20230424.txt and files in its
// format): one token per line,
//
//   ID LITERAL BYTE_LENGTH
//
// where LITERAL is a Python string or bytes literal ('abc', "it's",
// b'\xe4\xb8', with the usual escapes) whose bytes (a string's as UTF-8) the
// token stands for, and BYTE_LENGTH their count. Id 0 is the end-of-text
// token and has no bytes. Encoding is greedy longest match over the text's
// bytes: at each position the longest token that starts there. Every byte
// must have a token of its own, so that any text encodes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attn {

class RwkvVocabulary {
 public:
  // kInvalidArgument naming the line ("line 812: ...") for a malformed line,
  // a literal that does not parse, a length that disagrees with the
  // literal's bytes, an id used twice or below 1, two ids for the same
  // bytes; and naming the byte when a single byte has no token.
  static absl::StatusOr<RwkvVocabulary> Parse(absl::string_view text);

  // The ids of `bytes`, greedy longest match.
  std::vector<int64_t> Encode(absl::string_view bytes) const;
  // The bytes token `id` stands for; empty for id 0 and ids outside.
  const std::string& TokenBytes(int64_t id) const;
  // One more than the largest id.
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  // The file it was parsed from (what a model package stores).
  const std::string& text() const { return text_; }

 private:
  // A trie over the tokens' bytes: node 0 is the root; each node's children
  // sorted by byte.
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;
    int64_t id = -1;  // the token ending here, if any
  };
  int32_t Child(int32_t node, uint8_t byte) const;
  void Insert(const std::string& bytes, int64_t id);

  std::string text_;
  std::vector<std::string> tokens_;  // by id
  std::vector<Node> trie_;
};

// Parses one Python string or bytes literal (quotes included) into its
// bytes; kInvalidArgument saying what is wrong.
absl::StatusOr<std::string> ParsePythonLiteral(absl::string_view literal);

}  // namespace attn
