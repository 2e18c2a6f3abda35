// Byte-level BPE from a Hugging Face tokenizer.json (GPT-2's scheme, as in
// GPT-NeoX-20B's tokenizer that Mamba and RWKV-4 use). Encoding a text:
//
//   1. added tokens are matched first, leftmost-longest over the raw text;
//      the stretches between them go on alone;
//   2. the normalizer: none, or NFC;
//   3. the pre-tokenizer splits each stretch into words: ByteLevel with its
//      regex (contractions, ` ?\p{L}+`, ` ?\p{N}+`, ` ?` punctuation runs,
//      whitespace runs that leave their last space to the next word), or a
//      Sequence of Split (a regex, its matches isolated) and ByteLevel
//      without the regex; add_prefix_space puts a space before a stretch
//      that does not start with one;
//   4. each word's UTF-8 bytes become one character each (GPT-2's byte to
//      Unicode table: printable bytes stand for themselves, the rest for
//      U+0100 on), and its pieces are merged pairwise, the lowest-ranked
//      merge first, until none applies; each piece's id is its vocabulary
//      entry.
//
// Decoding is the ByteLevel decoder: a token's characters back to bytes (a
// token with characters outside the table, such as an added token, is its
// own UTF-8); special added tokens decode to nothing. Text that is not
// valid UTF-8 has each ill-formed sequence replaced by U+FFFD first.
//
// The regexes and NFC are ICU's, with Unicode's White_Space for \s. A
// tokenizer.json using anything else (another model type, normalizer,
// pre-tokenizer, decoder, post-processor, BPE dropout, byte fallback, an
// added token's lstrip/rstrip/single_word) is refused naming it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attn {

class ByteLevelBpe {
 public:
  // kInvalidArgument naming the JSON field, component or token that does
  // not parse or is not supported, or the byte whose character has no
  // vocabulary entry (every byte needs one, so that any text encodes).
  static absl::StatusOr<ByteLevelBpe> Parse(absl::string_view json);

  ByteLevelBpe(ByteLevelBpe&&) noexcept;
  ByteLevelBpe& operator=(ByteLevelBpe&&) noexcept;
  ~ByteLevelBpe();

  std::vector<int64_t> Encode(absl::string_view text) const;
  // The bytes token `id` adds to a decoded text; empty for special tokens
  // and ids without a token.
  const std::string& TokenBytes(int64_t id) const;
  // One more than the largest id.
  int64_t size() const;
  // The end-of-text token: the added token <|endoftext|> (or </s>), else -1.
  int64_t eos_id() const;
  // The tokenizer.json it was parsed from (what a model package stores).
  const std::string& json() const;

 private:
  struct Impl;
  explicit ByteLevelBpe(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace attn
