// The text stages of a Hugging Face tokenizer.json around its model: the
// normalizer and the pre-tokenizer that turn a stretch of text into words,
// and the decoder's view of one token. Internal to tokenizer_json.cc; the
// contract users rely on is tokenizer_json.h.
//
// Each stage follows the tokenizers library's documented semantics:
//   normalizers     NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace
//                   (a string or a regex), Sequence;
//   pre-tokenizers  Split (a string or a regex; Removed, Isolated,
//                   MergedWithPrevious, MergedWithNext; inverted too),
//                   ByteLevel (GPT-2's regex or none, add_prefix_space),
//                   Metaspace (prepend_scheme always, first or never; split),
//                   Digits, Sequence;
//   decoders        ByteLevel, Metaspace, and Sequences of Replace,
//                   ByteFallback, Fuse, Strip.
// Anything else is refused by name. Regexes are ICU's, with Unicode's
// White_Space for \s (what Oniguruma means by it).
#pragma once

#include <unicode/regex.h>
#include <unicode/unistr.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace attn::hf {

using Json = nlohmann::json;

// kInvalidArgument "tokenizer.json: WHERE: WHAT".
absl::Status Invalid(absl::string_view where, absl::string_view what);
// The "type" string of a component, "" if it has none.
std::string TypeOf(const Json& component);
// The boolean at `key` of `object`, `fallback` when absent or null.
absl::StatusOr<bool> BoolAt(const Json& object, const char* key, bool fallback,
                            absl::string_view where);
// A {"String": s} or {"Regex": r} pattern compiled for ICU.
absl::StatusOr<std::unique_ptr<icu::RegexPattern>> CompilePattern(const Json& pattern,
                                                                  absl::string_view where);

// GPT-2's byte to character table: printable Latin-1 bytes stand for the
// character of the same code, the others in order for U+0100, U+0101, ...
const std::vector<std::string>& ByteCharacters();

class Normalizer {
 public:
  // `json` null: no normalization.
  absl::Status Parse(const Json& json, absl::string_view where = "normalizer");
  void Apply(icu::UnicodeString& text) const;

 private:
  struct Step;
  absl::Status ParseOne(const Json& json, const std::string& where);
  std::vector<std::shared_ptr<Step>> steps_;
};

class PreTokenizer {
 public:
  // `json` null: the whole stretch is one word.
  absl::Status Parse(const Json& json);
  // Splits `stretch` into words. `at_text_start`: the stretch starts the
  // text (Metaspace's prepend_scheme "first" prepends only there). With a
  // ByteLevel step each word comes back as its bytes' characters.
  void Apply(const icu::UnicodeString& stretch, bool at_text_start,
             std::vector<std::string>& words) const;
  // Whether a ByteLevel step maps words to byte characters.
  bool byte_level() const { return byte_level_; }

 private:
  struct Step;
  absl::Status ParseOne(const Json& json, const std::string& where);
  std::vector<std::shared_ptr<Step>> steps_;
  bool byte_level_ = false;
};

// What one token adds to a decoded text, and whether the decoder removes
// the space that starts a text (Metaspace's prepended space, Strip).
class Decoder {
 public:
  absl::Status Parse(const Json& json);
  // The bytes `token` (a vocabulary string) decodes to.
  std::string TokenBytes(const std::string& token) const;
  bool strips_leading_space() const { return strips_leading_space_; }

 private:
  absl::Status ParseOne(const Json& json, const std::string& where);
  std::vector<std::pair<std::string, std::string>> replacements_;  // in order
  bool byte_level_ = false;
  bool byte_fallback_ = false;
  bool strips_leading_space_ = false;
};

}  // namespace attn::hf
