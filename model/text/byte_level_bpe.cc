#include "model/text/byte_level_bpe.h"

#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>

#include <limits>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace attn {
namespace {

using Json = nlohmann::json;

// GPT-2's pre-tokenizer pattern, with Unicode's White_Space for \s.
constexpr char kByteLevelPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+)"
    R"(|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+)";

absl::Status Invalid(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", where, ": ", what));
}

// GPT-2's table: printable Latin-1 bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF)
// stand for the character of the same code; the other bytes, in order, for
// U+0100, U+0101, ...
std::vector<std::string> ByteCharacters() {
  std::vector<std::string> table(256);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const UChar32 code = printable ? b : next++;
    icu::UnicodeString(code).toUTF8String(table[b]);
  }
  return table;
}

// An Oniguruma-style pattern for ICU: \s and \S as Unicode's White_Space.
icu::UnicodeString ForIcu(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        out += "\\p{White_Space}";
      } else if (next == 'S') {
        out += "\\P{White_Space}";
      } else {
        out += '\\';
        out += next;
      }
    } else {
      out += pattern[i];
    }
  }
  return icu::UnicodeString::fromUTF8(out);
}

absl::StatusOr<std::unique_ptr<icu::RegexPattern>> Compile(const icu::UnicodeString& pattern,
                                                           absl::string_view where) {
  UErrorCode status = U_ZERO_ERROR;
  UParseError parse;
  std::unique_ptr<icu::RegexPattern> compiled(
      icu::RegexPattern::compile(pattern, 0, parse, status));
  if (U_FAILURE(status)) {
    return Invalid(where, absl::StrCat("the regex does not compile (", u_errorName(status),
                                       " at offset ", parse.offset, ")"));
  }
  return compiled;
}

// The boolean at `key` of `object`, `fallback` when absent or null.
absl::StatusOr<bool> BoolAt(const Json& object, const char* key, bool fallback,
                            absl::string_view where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Invalid(absl::StrCat(where, ".", key), "must be true or false");
  return it->get<bool>();
}

std::string TypeOf(const Json& component) {
  auto it = component.find("type");
  return it != component.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

struct ByteLevelBpe::Impl {
  std::string json;
  std::vector<std::string> token_bytes;                 // by id
  absl::flat_hash_map<std::string, int64_t> vocab;      // byte-level string -> id
  absl::flat_hash_map<std::string, int> merge_ranks;    // "a b" -> rank
  std::map<std::string, int64_t, std::less<>> added;   // content -> id
  bool added_first_byte[256] = {};                      // some added token starts with it
  size_t longest_added = 0;
  int64_t eos = -1;
  bool nfc = false;
  bool ignore_merges = false;
  // Pre-tokenizer: an optional Split (isolating or removing its matches),
  // then ByteLevel.
  std::unique_ptr<icu::RegexPattern> split;
  bool split_removes = false;
  bool add_prefix_space = false;
  std::unique_ptr<icu::RegexPattern> byte_level;  // null: use_regex false
  std::vector<std::string> byte_chars = ByteCharacters();

  absl::Status ParseModel(const Json& model);
  absl::Status ParseNormalizer(const Json& normalizer);
  absl::Status ParsePreTokenizer(const Json& pre);
  absl::Status ParseByteLevel(const Json& byte_level, absl::string_view where);
  absl::Status ParseSplit(const Json& split_json, absl::string_view where);
  absl::Status ParseAddedTokens(const Json& added_tokens);
  absl::Status FillTokenBytes();

  void EncodeStretch(absl::string_view text, std::vector<int64_t>& ids) const;
  void EncodeWord(const icu::UnicodeString& word, std::vector<int64_t>& ids) const;
  // Appends the pieces of `text` a regex splits it into: its matches and
  // the gaps between them (matches dropped when `removes`).
  static void SplitBy(const icu::RegexPattern& pattern, bool removes,
                      const icu::UnicodeString& text, std::vector<icu::UnicodeString>& pieces);
};

absl::Status ByteLevelBpe::Impl::ParseModel(const Json& model) {
  if (!model.is_object()) return Invalid("model", "missing or not an object");
  const std::string type = TypeOf(model);
  if (!type.empty() && type != "BPE") {
    return Invalid("model.type", absl::StrCat("\"", type, "\" is not supported (only BPE)"));
  }
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null() &&
                                       !(it->is_number() && it->get<double>() == 0.0)) {
    return Invalid("model.dropout", "BPE dropout is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty())) {
      return Invalid(absl::StrCat("model.", key), "is not supported by byte-level BPE");
    }
  }
  absl::StatusOr<bool> fallback = BoolAt(model, "byte_fallback", false, "model");
  if (!fallback.ok()) return fallback.status();
  if (*fallback) return Invalid("model.byte_fallback", "byte fallback is not supported");
  absl::StatusOr<bool> ignore = BoolAt(model, "ignore_merges", false, "model");
  if (!ignore.ok()) return ignore.status();
  ignore_merges = *ignore;
  auto vocab_json = model.find("vocab");
  if (vocab_json == model.end() || !vocab_json->is_object()) {
    return Invalid("model.vocab", "missing or not an object");
  }
  for (const auto& [token, id] : vocab_json->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 24)) {
      return Invalid(absl::StrCat("model.vocab[\"", token, "\"]"), "must be an id in [0, 2^24)");
    }
    vocab[token] = id.get<int64_t>();
  }
  auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) {
    return Invalid("model.merges", "missing or not an array");
  }
  int rank = 0;
  for (const Json& merge : *merges) {
    std::string left, right;
    if (merge.is_string()) {
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        return Invalid(absl::StrCat("model.merges[", rank, "]"), "must be \"left right\"");
      }
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return Invalid(absl::StrCat("model.merges[", rank, "]"),
                     "must be \"left right\" or [left, right]");
    }
    merge_ranks.emplace(absl::StrCat(left, " ", right), rank++);
  }
  return absl::OkStatus();
}

absl::Status ByteLevelBpe::Impl::ParseNormalizer(const Json& normalizer) {
  if (normalizer.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(normalizer);
  if (type != "NFC") {
    return Invalid("normalizer", absl::StrCat("\"", type, "\" is not supported (none or NFC)"));
  }
  nfc = true;
  return absl::OkStatus();
}

absl::Status ByteLevelBpe::Impl::ParseByteLevel(const Json& json, absl::string_view where) {
  absl::StatusOr<bool> prefix = BoolAt(json, "add_prefix_space", true, where);
  if (!prefix.ok()) return prefix.status();
  absl::StatusOr<bool> use_regex = BoolAt(json, "use_regex", true, where);
  if (!use_regex.ok()) return use_regex.status();
  add_prefix_space = *prefix;
  if (*use_regex) {
    absl::StatusOr<std::unique_ptr<icu::RegexPattern>> compiled =
        Compile(icu::UnicodeString::fromUTF8(kByteLevelPattern), where);
    if (!compiled.ok()) return compiled.status();
    byte_level = *std::move(compiled);
  }
  return absl::OkStatus();
}

absl::Status ByteLevelBpe::Impl::ParseSplit(const Json& json, absl::string_view where) {
  auto behavior_json = json.find("behavior");
  const std::string behavior = behavior_json != json.end() && behavior_json->is_string()
                                   ? behavior_json->get<std::string>()
                                   : "";
  if (behavior != "Isolated" && behavior != "Removed") {
    return Invalid(absl::StrCat(where, ".behavior"),
                   absl::StrCat("\"", behavior, "\" is not supported (Isolated or Removed)"));
  }
  absl::StatusOr<bool> invert = BoolAt(json, "invert", false, where);
  if (!invert.ok()) return invert.status();
  if (*invert) return Invalid(absl::StrCat(where, ".invert"), "an inverted Split is not supported");
  auto pattern = json.find("pattern");
  icu::UnicodeString text;
  if (pattern != json.end() && pattern->contains("Regex") && (*pattern)["Regex"].is_string()) {
    text = ForIcu((*pattern)["Regex"].get<std::string>());
  } else if (pattern != json.end() && pattern->contains("String") &&
             (*pattern)["String"].is_string()) {
    text = icu::UnicodeString::fromUTF8(absl::StrCat("\\Q", (*pattern)["String"].get<std::string>(), "\\E"));
  } else {
    return Invalid(absl::StrCat(where, ".pattern"), "must be {\"Regex\": ...} or {\"String\": ...}");
  }
  absl::StatusOr<std::unique_ptr<icu::RegexPattern>> compiled = Compile(text, where);
  if (!compiled.ok()) return compiled.status();
  split = *std::move(compiled);
  split_removes = behavior == "Removed";
  return absl::OkStatus();
}

absl::Status ByteLevelBpe::Impl::ParsePreTokenizer(const Json& pre) {
  const std::string type = pre.is_object() ? TypeOf(pre) : "";
  if (type == "ByteLevel") return ParseByteLevel(pre, "pre_tokenizer");
  if (type == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array()) {
    const Json& parts = pre["pretokenizers"];
    if (parts.size() == 2 && TypeOf(parts[0]) == "Split" && TypeOf(parts[1]) == "ByteLevel") {
      if (auto s = ParseSplit(parts[0], "pre_tokenizer.pretokenizers[0]"); !s.ok()) return s;
      return ParseByteLevel(parts[1], "pre_tokenizer.pretokenizers[1]");
    }
    if (parts.size() == 1 && TypeOf(parts[0]) == "ByteLevel") {
      return ParseByteLevel(parts[0], "pre_tokenizer.pretokenizers[0]");
    }
    return Invalid("pre_tokenizer", "a Sequence is supported only as [Split, ByteLevel]");
  }
  return Invalid("pre_tokenizer",
                 absl::StrCat("\"", type, "\" is not supported (ByteLevel, or Sequence of Split "
                                          "and ByteLevel)"));
}

absl::Status ByteLevelBpe::Impl::ParseAddedTokens(const Json& tokens) {
  if (tokens.is_null()) return absl::OkStatus();
  if (!tokens.is_array()) return Invalid("added_tokens", "must be an array");
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Json& token = tokens[i];
    const std::string where = absl::StrCat("added_tokens[", i, "]");
    if (!token.is_object() || !token.contains("id") || !token["id"].is_number_integer() ||
        !token.contains("content") || !token["content"].is_string()) {
      return Invalid(where, "needs an integer id and a string content");
    }
    const int64_t id = token["id"].get<int64_t>();
    const std::string content = token["content"].get<std::string>();
    if (id < 0 || id >= (1 << 24) || content.empty()) {
      return Invalid(where, "needs an id in [0, 2^24) and a non-empty content");
    }
    for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
      absl::StatusOr<bool> set = BoolAt(token, flag, false, where);
      if (!set.ok()) return set.status();
      if (*set) return Invalid(absl::StrCat(where, ".", flag), "is not supported");
    }
    absl::StatusOr<bool> special = BoolAt(token, "special", false, where);
    if (!special.ok()) return special.status();
    added[content] = id;
    added_first_byte[static_cast<unsigned char>(content[0])] = true;
    longest_added = std::max(longest_added, content.size());
    if (token_bytes.size() <= static_cast<size_t>(id)) token_bytes.resize(id + 1);
    // Special tokens decode to nothing; others to their content.
    token_bytes[id] = *special ? "" : content;
    if (*special && (content == "<|endoftext|>" || (content == "</s>" && eos < 0))) eos = id;
  }
  return absl::OkStatus();
}

absl::Status ByteLevelBpe::Impl::FillTokenBytes() {
  absl::flat_hash_map<std::string, char> byte_of;
  for (int b = 0; b < 256; ++b) {
    if (!vocab.contains(byte_chars[b])) {
      return Invalid("model.vocab", absl::StrCat("byte 0x", absl::Hex(b, absl::kZeroPad2),
                                                 " has no token (", byte_chars[b], ")"));
    }
    byte_of[byte_chars[b]] = static_cast<char>(b);
  }
  for (const auto& [token, id] : vocab) {
    if (token_bytes.size() <= static_cast<size_t>(id)) token_bytes.resize(id + 1);
    if (added.count(token)) continue;  // an added token keeps what it decodes to
    // The ByteLevel decoder: every character back to its byte, or the
    // token's own UTF-8 if one has none.
    const icu::UnicodeString chars = icu::UnicodeString::fromUTF8(token);
    std::string bytes;
    bool all = true;
    for (int32_t at = 0; at < chars.length() && all;) {
      std::string one;
      const UChar32 c = chars.char32At(at);
      icu::UnicodeString(c).toUTF8String(one);
      auto it = byte_of.find(one);
      all = it != byte_of.end();
      if (all) bytes.push_back(it->second);
      at += U16_LENGTH(c);
    }
    token_bytes[id] = all ? bytes : token;
  }
  return absl::OkStatus();
}

void ByteLevelBpe::Impl::SplitBy(const icu::RegexPattern& pattern, bool removes,
                                 const icu::UnicodeString& text,
                                 std::vector<icu::UnicodeString>& pieces) {
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexMatcher> matcher(pattern.matcher(text, status));
  int32_t last = 0;
  while (U_SUCCESS(status) && matcher->find(status)) {
    const int32_t start = matcher->start(status), end = matcher->end(status);
    if (end == start) continue;  // empty matches split nothing
    if (start > last) pieces.push_back(text.tempSubStringBetween(last, start));
    if (!removes) pieces.push_back(text.tempSubStringBetween(start, end));
    last = end;
  }
  if (last < text.length()) pieces.push_back(text.tempSubStringBetween(last));
}

void ByteLevelBpe::Impl::EncodeWord(const icu::UnicodeString& word, std::vector<int64_t>& ids) const {
  std::string utf8;
  word.toUTF8String(utf8);
  std::vector<std::string> parts;
  parts.reserve(utf8.size());
  for (unsigned char byte : utf8) parts.push_back(byte_chars[byte]);
  if (ignore_merges) {
    std::string whole;
    for (const auto& part : parts) whole += part;
    if (auto it = vocab.find(whole); it != vocab.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  std::string key;
  while (parts.size() > 1) {
    int best = std::numeric_limits<int>::max();
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      key.assign(parts[i]).append(" ").append(parts[i + 1]);
      auto it = merge_ranks.find(key);
      if (it != merge_ranks.end() && it->second < best) best = it->second, at = i;
    }
    if (best == std::numeric_limits<int>::max()) break;
    // Merge every occurrence of the best pair, left to right.
    const std::string left = parts[at], right = parts[at + 1];
    std::vector<std::string> merged;
    merged.reserve(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i + 1 < parts.size() && parts[i] == left && parts[i + 1] == right) {
        merged.push_back(left + right);
        ++i;
      } else {
        merged.push_back(std::move(parts[i]));
      }
    }
    parts = std::move(merged);
  }
  for (const auto& part : parts) {
    auto it = vocab.find(part);
    if (it != vocab.end()) {
      ids.push_back(it->second);
    } else {  // a merge whose result has no entry: its bytes one by one
      for (size_t i = 0; i < part.size();) {
        const icu::UnicodeString c = icu::UnicodeString::fromUTF8(part.substr(i));
        std::string one;
        icu::UnicodeString(c.char32At(0)).toUTF8String(one);
        ids.push_back(vocab.at(one));
        i += one.size();
      }
    }
  }
}

void ByteLevelBpe::Impl::EncodeStretch(absl::string_view stretch, std::vector<int64_t>& ids) const {
  icu::UnicodeString text = icu::UnicodeString::fromUTF8(
      icu::StringPiece(stretch.data(), static_cast<int32_t>(stretch.size())));
  if (nfc) {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* normalizer = icu::Normalizer2::getNFCInstance(status);
    if (U_SUCCESS(status)) text = normalizer->normalize(text, status);
  }
  std::vector<icu::UnicodeString> pieces;
  if (split) {
    SplitBy(*split, split_removes, text, pieces);
  } else {
    pieces.push_back(text);
  }
  for (icu::UnicodeString& piece : pieces) {
    if (add_prefix_space && !piece.startsWith(icu::UnicodeString(u' '))) piece.insert(0, u' ');
    if (!byte_level) {
      EncodeWord(piece, ids);
      continue;
    }
    std::vector<icu::UnicodeString> words;
    SplitBy(*byte_level, false, piece, words);
    for (const auto& word : words) EncodeWord(word, ids);
  }
}

ByteLevelBpe::ByteLevelBpe(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ByteLevelBpe::ByteLevelBpe(ByteLevelBpe&&) noexcept = default;
ByteLevelBpe& ByteLevelBpe::operator=(ByteLevelBpe&&) noexcept = default;
ByteLevelBpe::~ByteLevelBpe() = default;

absl::StatusOr<ByteLevelBpe> ByteLevelBpe::Parse(absl::string_view text) {
  const Json json = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) return Invalid("(file)", "not a JSON object");
  auto impl = std::make_unique<Impl>();
  impl->json = std::string(text);
  const Json null;
  auto at = [&](const char* key) -> const Json& {
    auto it = json.find(key);
    return it == json.end() ? null : *it;
  };
  if (auto s = impl->ParseModel(at("model")); !s.ok()) return s;
  if (auto s = impl->ParseNormalizer(at("normalizer")); !s.ok()) return s;
  if (auto s = impl->ParsePreTokenizer(at("pre_tokenizer")); !s.ok()) return s;
  const std::string decoder = TypeOf(at("decoder"));
  if (decoder != "ByteLevel") {
    return Invalid("decoder", absl::StrCat("\"", decoder, "\" is not supported (ByteLevel)"));
  }
  const Json& post = at("post_processor");
  if (!post.is_null() && TypeOf(post) != "ByteLevel") {
    return Invalid("post_processor",
                   absl::StrCat("\"", TypeOf(post), "\" is not supported (none or ByteLevel)"));
  }
  if (auto s = impl->ParseAddedTokens(at("added_tokens")); !s.ok()) return s;
  if (auto s = impl->FillTokenBytes(); !s.ok()) return s;
  return ByteLevelBpe(std::move(impl));
}

std::vector<int64_t> ByteLevelBpe::Encode(absl::string_view text) const {
  std::vector<int64_t> ids;
  const Impl& m = *impl_;
  size_t start = 0, at = 0;
  while (at < text.size()) {
    // The longest added token starting here, if any.
    size_t length = 0;
    int64_t id = -1;
    const bool may_start = m.added_first_byte[static_cast<unsigned char>(text[at])];
    for (size_t n = std::min(m.longest_added, text.size() - at); may_start && n > 0 && id < 0; --n) {
      auto it = m.added.find(text.substr(at, n));
      if (it != m.added.end()) length = n, id = it->second;
    }
    if (id < 0) {
      ++at;
      continue;
    }
    if (at > start) m.EncodeStretch(text.substr(start, at - start), ids);
    ids.push_back(id);
    at += length;
    start = at;
  }
  if (start < text.size()) m.EncodeStretch(text.substr(start), ids);
  return ids;
}

const std::string& ByteLevelBpe::TokenBytes(int64_t id) const {
  static const std::string* const kNone = new std::string;
  if (id < 0 || id >= size()) return *kNone;
  return impl_->token_bytes[id];
}

int64_t ByteLevelBpe::size() const { return static_cast<int64_t>(impl_->token_bytes.size()); }
int64_t ByteLevelBpe::eos_id() const { return impl_->eos; }
const std::string& ByteLevelBpe::json() const { return impl_->json; }

}  // namespace attn
