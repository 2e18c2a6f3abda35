// Text <-> token ids, with one of three vocabularies:
//   "sentencepiece"  a SentencePiece model trained with byte fallback (this
//                    project's packages): any UTF-8 text has an encoding, and
//                    decoding it gives the text back;
//   "rwkv-world"     the RWKV World vocabulary (model/text/rwkv_vocabulary.h),
//                    greedy longest match over bytes; id 0 ends a text;
//   "tokenizer-json" a Hugging Face tokenizer.json with a BPE model
//                    (model/text/tokenizer_json.h): byte-level (GPT-2,
//                    GPT-NeoX, Llama 3, Qwen) or with byte fallback (Llama 2,
//                    Mistral, Gemma); packages written before it was named
//                    so say "byte-level-bpe", which loads the same way;
//   "bytes"          UTF-8 bytes as ids 0..255.
//
// IncrementalDecoder turns a stream of ids into text pieces as they arrive
// and never emits part of a UTF-8 character: a character split over several
// byte tokens comes out once its last byte has arrived. The pieces
// concatenate to Tokenizer::Decode of the same ids.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace attn {

namespace spm {
class Processor;
}
class RwkvVocabulary;
class TokenizerJson;

struct TokenizerTrainOptions {
  std::vector<std::string> input_files;  // plain text, one sentence per line
  int vocab_size = 4096;
  std::string model_type = "unigram";  // or "bpe"
  int64_t input_sentence_size = 2000000;
  int seed = 1;
  int threads = 1;
};

class Tokenizer {
 public:
  // Trains a model on the files; kInvalidArgument with SentencePiece's reason
  // (missing file, vocabulary too large for the text, ...).
  static absl::StatusOr<Tokenizer> Train(const TokenizerTrainOptions& options);
  // Loads a serialized model (as stored in a model package).
  static absl::StatusOr<Tokenizer> FromSerialized(const std::string& serialized_model);
  // Parses an RWKV World vocabulary file (model/text/rwkv_vocabulary.h);
  // kInvalidArgument naming the line that does not parse.
  static absl::StatusOr<Tokenizer> FromRwkvVocabulary(const std::string& text);
  // Parses a Hugging Face tokenizer.json (model/text/tokenizer_json.h);
  // kInvalidArgument naming the field or component it cannot use.
  static absl::StatusOr<Tokenizer> FromTokenizerJson(const std::string& json);
  // A tokenizer as a package stores it: its kind ("sentencepiece",
  // "rwkv-world" or "tokenizer-json", kind(); also the older name
  // "byte-level-bpe") and its Serialized() bytes. kInvalidArgument for
  // another kind or bytes that do not load.
  static absl::StatusOr<Tokenizer> FromStored(const std::string& kind, const std::string& bytes);
  // Every kind a package may name: the stored kinds FromStored reads, then
  // "bytes" (which stores nothing).
  static const std::vector<std::string>& Kinds();
  // Whether a package may name `kind`: one of Kinds() or an older name of one.
  static bool IsKind(const std::string& kind);
  // UTF-8 bytes as ids 0..255 (docs/model-contract.md, tokenizer "bytes"):
  // ids from 256 up to vocab_size decode to nothing; eos_id may be -1 (none).
  // kInvalidArgument unless 256 <= vocab_size and eos_id < vocab_size.
  static absl::StatusOr<Tokenizer> Bytes(int64_t vocab_size, int64_t eos_id);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // add_special_tokens: the tokens a tokenizer.json's post-processor puts
  // around a text (Llama's BOS), as Hugging Face's encode does by default;
  // the other kinds add none.
  std::vector<int64_t> Encode(const std::string& text, bool add_special_tokens = false) const;
  // keep_special_tokens: special tokens appear as their text ("<|im_end|>",
  // SentencePiece's "</s>"), as Hugging Face's decode without
  // skip_special_tokens; otherwise they decode to nothing.
  std::string Decode(const std::vector<int64_t>& ids, bool keep_special_tokens = false) const;

  // Ids that are valid: the tokenizer's, or the model's embedding rows
  // when PadTo made them more.
  int64_t vocab_size() const;
  // Ids the tokenizer has a token for (a sampler draws only these; for
  // "bytes", every id of its vocab_size).
  int64_t text_vocab_size() const;
  // The model's embedding has `model_vocab_size` rows, more than the
  // tokenizer's ids (mamba_ssm pads them to a multiple of 16): the extra
  // ids are valid input and decode to nothing. Smaller sizes change nothing.
  void PadTo(int64_t model_vocab_size);
  int64_t bos_id() const;
  int64_t eos_id() const;
  // The bytes token `id` adds to decoded text: its piece with the word mark
  // as a space, a byte token's byte, nothing for control tokens. (Decode
  // drops the single space that starts a text.)
  std::string TokenBytes(int64_t id) const;
  // A special token's text (tokenizer.json's special added tokens,
  // SentencePiece's control pieces); empty for every other id.
  std::string SpecialText(int64_t id) const;
  bool IsValidId(int64_t id) const { return id >= 0 && id < vocab_size(); }
  // What FromStored reads back: the SentencePiece model, the RWKV World
  // vocabulary file, the tokenizer.json; empty for a bytes tokenizer.
  std::string Serialized() const;
  // "sentencepiece", "rwkv-world", "tokenizer-json" or "bytes".
  std::string kind() const;
  // Whether a text's decoding drops the space before its first word
  // (SentencePiece marks word starts, as do Metaspace and Strip decoders of
  // a tokenizer.json; bytes are taken as they are).
  bool drops_leading_space() const;

 private:
  explicit Tokenizer(std::unique_ptr<spm::Processor> processor);
  explicit Tokenizer(std::unique_ptr<RwkvVocabulary> vocabulary);
  explicit Tokenizer(std::unique_ptr<TokenizerJson> json);
  Tokenizer(int64_t byte_vocab_size, int64_t byte_eos_id);
  // At most one of the three is set; none: bytes.
  std::unique_ptr<spm::Processor> processor_;
  std::unique_ptr<RwkvVocabulary> vocabulary_;
  std::unique_ptr<TokenizerJson> json_;
  int64_t byte_vocab_size_ = 0;
  int64_t padded_size_ = 0;  // PadTo's, when above the tokenizer's own
  int64_t byte_eos_id_ = -1;
};

class IncrementalDecoder {
 public:
  // continues_text: the ids continue a text already shown (a prompt), so
  // the space before their first word is kept; a new text drops it, as
  // Decode does.
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool continues_text = false)
      : tokenizer_(&tokenizer), at_start_(!continues_text) {}

  // Adds one id; returns the text it completes (possibly empty).
  std::string Push(int64_t id);
  // Ends the stream: bytes of an unfinished character come out as U+FFFD.
  std::string Finish();

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;  // bytes not yet emitted: at most an unfinished character
  bool at_start_;
};

}  // namespace attn
