// A Hugging Face tokenizer.json with a BPE model: the byte-level BPE of
// GPT-2, GPT-NeoX, Llama 3, Qwen2/3, Mistral's Tekken and DeepSeek, and the
// SentencePiece-style BPE with byte fallback of Llama 2, Mistral 7B and
// Gemma. Encoding a text:
//
//   1. added tokens are matched first, leftmost-longest over the raw text
//      (lstrip/rstrip take the whitespace beside them); the stretches
//      between them go on alone;
//   2. the normalizer (hf_pipeline.h): NFC and the other Unicode forms,
//      Lowercase, Prepend, Replace, Sequence;
//   3. the pre-tokenizer splits each stretch into words: Split (regex or
//      string, every behavior, inverted too), ByteLevel (GPT-2's regex,
//      add_prefix_space), Metaspace (prepend_scheme, split), Digits, or a
//      Sequence of them; after ByteLevel a word is its UTF-8 bytes, each as
//      the character GPT-2's table gives it;
//   4. BPE: each character of a word is a symbol (its vocabulary entry; with
//      byte_fallback, a character the vocabulary lacks is its bytes'
//      <0xAB> tokens; else the unknown token, runs fused under fuse_unk;
//      else nothing: a byte-level vocabulary may lack the 13 bytes that
//      never occur in UTF-8), then adjacent pairs merge, the lowest-ranked
//      merge first and leftmost among equals, until none applies.
//      ignore_merges takes a word that is itself an entry whole;
//   5. with add_special_tokens, the post-processor's TemplateProcessing puts
//      its special tokens around the ids (Llama's BOS).
//
// Decoding maps each token to bytes as the decoder says (ByteLevel's table,
// Metaspace's or Replace's ▁ to space, ByteFallback's <0xAB> to its byte);
// special added tokens decode to nothing; Strip after Fuse, and Metaspace,
// drop the space that starts a text. Text that is not valid UTF-8 has each
// ill-formed sequence replaced by U+FFFD before encoding.
//
// Anything else (another model type, BPE dropout, a subword prefix or
// suffix, an added token's single_word, another component) is refused by
// name, so that a tokenizer that loads encodes as its authors' library does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attn {

class TokenizerJson {
 public:
  // kInvalidArgument naming the JSON field, component or token that does
  // not parse or is not supported.
  static absl::StatusOr<TokenizerJson> Parse(absl::string_view json);

  TokenizerJson(TokenizerJson&&) noexcept;
  TokenizerJson& operator=(TokenizerJson&&) noexcept;
  ~TokenizerJson();

  // add_special_tokens: as the post-processor's template says (nothing
  // without a TemplateProcessing).
  std::vector<int64_t> Encode(absl::string_view text, bool add_special_tokens = false) const;
  // The bytes token `id` adds to a decoded text; empty for special tokens
  // and ids without a token.
  const std::string& TokenBytes(int64_t id) const;
  // A special added token's content ("<|im_start|>"); empty for any other
  // id.
  const std::string& SpecialContent(int64_t id) const;
  // Whether decoding drops the space that starts a text.
  bool strips_leading_space() const;
  // One more than the largest id.
  int64_t size() const;
  // The first special token the template puts before a text, else -1.
  int64_t bos_id() const;
  // The end-of-text token: the first special added token of <|endoftext|>,
  // <|end_of_text|>, </s>, <eos>, <｜end▁of▁sentence｜>; else -1.
  int64_t eos_id() const;
  // The tokenizer.json it was parsed from (what a model package stores).
  const std::string& json() const;

 private:
  struct Impl;
  explicit TokenizerJson(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace attn
