#include "model/text/hf_pipeline.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace attn::hf {
namespace {

// GPT-2's pre-tokenizer pattern, with Unicode's White_Space for \s.
constexpr char kByteLevelPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+)"
    R"(|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+)";

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

absl::StatusOr<std::string> StringAt(const Json& object, const char* key, absl::string_view where) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) {
    return Invalid(absl::StrCat(where, ".", key), "missing or not a string");
  }
  return it->get<std::string>();
}

// Metaspace's prepend_scheme: always, first or never; older files say
// add_prefix_space instead (a boolean, true when absent).
absl::StatusOr<std::string> PrependScheme(const Json& object, absl::string_view where) {
  absl::StatusOr<bool> prefix = BoolAt(object, "add_prefix_space", true, where);
  if (!prefix.ok()) return prefix.status();
  auto it = object.find("prepend_scheme");
  if (it == object.end()) return std::string(*prefix ? "always" : "never");
  const std::string field = absl::StrCat(where, ".prepend_scheme");
  if (!it->is_string()) return Invalid(field, "must be a string: always, first or never");
  std::string scheme = it->get<std::string>();
  if (scheme != "always" && scheme != "first" && scheme != "never") {
    return Invalid(field, absl::StrCat("\"", scheme, "\" is not always, first or never"));
  }
  return scheme;
}

}  // namespace

// Pieces of `text` as a Split with `pattern` makes them: each match is a
// delimiter (or, inverted, each gap between matches), and `behavior` says
// what becomes of delimiters. Outside the anonymous namespace because
// PreTokenizer::Step holds one (a member's type must not have internal
// linkage when this file is compiled in a unity batch).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext };

namespace {

struct Span {
  int32_t start, end;
  bool delimiter;
};

std::vector<Span> Spans(const icu::RegexPattern& pattern, bool invert,
                        const icu::UnicodeString& text) {
  std::vector<Span> spans;
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexMatcher> matcher(pattern.matcher(text, status));
  int32_t last = 0;
  while (U_SUCCESS(status) && matcher->find(status)) {
    const int32_t start = matcher->start(status), end = matcher->end(status);
    if (end == start) continue;  // empty matches split nothing
    if (start > last) spans.push_back({last, start, invert});
    spans.push_back({start, end, !invert});
    last = end;
  }
  if (last < text.length()) spans.push_back({last, text.length(), invert});
  return spans;
}

std::vector<Span> ApplyBehavior(std::vector<Span> spans, SplitBehavior behavior) {
  std::vector<Span> out;
  bool previous_delimiter = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.delimiter) out.push_back(s);
      }
      return out;
    case SplitBehavior::kIsolated:
      return spans;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.delimiter && !previous_delimiter && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_delimiter = s.delimiter;
      }
      return out;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->delimiter && !previous_delimiter && !out.empty()) {
          out.back().start = it->start;
        } else {
          out.push_back(*it);
        }
        previous_delimiter = it->delimiter;
      }
      return std::vector<Span>(out.rbegin(), out.rend());
  }
  return spans;
}

void SplitPieces(const icu::RegexPattern& pattern, bool invert, SplitBehavior behavior,
                 std::vector<icu::UnicodeString>& pieces) {
  std::vector<icu::UnicodeString> out;
  for (const icu::UnicodeString& piece : pieces) {
    for (const Span& s : ApplyBehavior(Spans(pattern, invert, piece), behavior)) {
      out.emplace_back(piece, s.start, s.end - s.start);  // a copy: `pieces` goes
    }
  }
  pieces = std::move(out);
}

absl::StatusOr<SplitBehavior> ParseBehavior(const Json& json, absl::string_view where) {
  auto it = json.find("behavior");
  const std::string name = it != json.end() && it->is_string() ? it->get<std::string>() : "";
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  return Invalid(absl::StrCat(where, ".behavior"),
                 absl::StrCat("\"", name, "\" is not supported (Removed, Isolated, ",
                              "MergedWithPrevious or MergedWithNext)"));
}

// "<0xAB>" -> 0xAB; -1 for anything else.
int ByteFallbackValue(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  int value = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = token[i];
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

}  // namespace

absl::Status Invalid(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", where, ": ", what));
}

std::string TypeOf(const Json& component) {
  if (!component.is_object()) return "";
  auto it = component.find("type");
  return it != component.end() && it->is_string() ? it->get<std::string>() : "";
}

absl::StatusOr<bool> BoolAt(const Json& object, const char* key, bool fallback,
                            absl::string_view where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Invalid(absl::StrCat(where, ".", key), "must be true or false");
  return it->get<bool>();
}

absl::StatusOr<std::unique_ptr<icu::RegexPattern>> CompilePattern(const Json& pattern,
                                                                  absl::string_view where) {
  if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
    return Compile(ForIcu(pattern["Regex"].get<std::string>()), where);
  }
  if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
    return Compile(icu::UnicodeString::fromUTF8(
                       absl::StrCat("\\Q", pattern["String"].get<std::string>(), "\\E")),
                   where);
  }
  return Invalid(absl::StrCat(where, ".pattern"), "must be {\"Regex\": ...} or {\"String\": ...}");
}

const std::vector<std::string>& ByteCharacters() {
  static const auto* table = [] {
    auto* chars = new std::vector<std::string>(256);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const UChar32 code = printable ? b : next++;
      icu::UnicodeString(code).toUTF8String((*chars)[b]);
    }
    return chars;
  }();
  return *table;
}

// ---- Normalizer

struct Normalizer::Step {
  enum Kind { kUnicode, kLowercase, kPrepend, kReplace } kind;
  const icu::Normalizer2* form = nullptr;      // kUnicode
  icu::UnicodeString text;                     // kPrepend, kReplace's content
  std::unique_ptr<icu::RegexPattern> pattern;  // kReplace
};

absl::Status Normalizer::Parse(const Json& json, absl::string_view where) {
  if (json.is_null()) return absl::OkStatus();
  return ParseOne(json, std::string(where));
}

absl::Status Normalizer::ParseOne(const Json& json, const std::string& where) {
  const std::string type = TypeOf(json);
  if (type == "Sequence") {
    auto parts = json.find("normalizers");
    if (parts == json.end() || !parts->is_array()) {
      return Invalid(absl::StrCat(where, ".normalizers"), "missing or not an array");
    }
    for (size_t i = 0; i < parts->size(); ++i) {
      if (auto s = ParseOne((*parts)[i], absl::StrCat(where, ".normalizers[", i, "]")); !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
  auto step = std::make_shared<Step>();
  UErrorCode status = U_ZERO_ERROR;
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step->kind = Step::kUnicode;
    step->form = type == "NFC"    ? icu::Normalizer2::getNFCInstance(status)
                 : type == "NFD"  ? icu::Normalizer2::getNFDInstance(status)
                 : type == "NFKC" ? icu::Normalizer2::getNFKCInstance(status)
                                  : icu::Normalizer2::getNFKDInstance(status);
    if (U_FAILURE(status)) return Invalid(where, "ICU has no data for this form");
  } else if (type == "Lowercase") {
    step->kind = Step::kLowercase;
  } else if (type == "Prepend") {
    absl::StatusOr<std::string> prepend = StringAt(json, "prepend", where);
    if (!prepend.ok()) return prepend.status();
    step->kind = Step::kPrepend;
    step->text = icu::UnicodeString::fromUTF8(*prepend);
  } else if (type == "Replace") {
    absl::StatusOr<std::string> content = StringAt(json, "content", where);
    if (!content.ok()) return content.status();
    auto pattern = CompilePattern(json.value("pattern", Json()), where);
    if (!pattern.ok()) return pattern.status();
    step->kind = Step::kReplace;
    step->text = icu::UnicodeString::fromUTF8(*content);
    step->pattern = *std::move(pattern);
  } else {
    return Invalid(where, absl::StrCat("\"", type, "\" is not supported (NFC, NFD, NFKC, NFKD, ",
                                       "Lowercase, Prepend, Replace or a Sequence of them)"));
  }
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

void Normalizer::Apply(icu::UnicodeString& text) const {
  for (const auto& step : steps_) {
    UErrorCode status = U_ZERO_ERROR;
    switch (step->kind) {
      case Step::kUnicode:
        text = step->form->normalize(text, status);
        break;
      case Step::kLowercase:
        text.toLower(icu::Locale::getRoot());
        break;
      case Step::kPrepend:
        if (!text.isEmpty()) text.insert(0, step->text);
        break;
      case Step::kReplace: {
        icu::UnicodeString out;
        int32_t last = 0;
        std::unique_ptr<icu::RegexMatcher> matcher(step->pattern->matcher(text, status));
        while (U_SUCCESS(status) && matcher->find(status)) {
          const int32_t start = matcher->start(status), end = matcher->end(status);
          if (end == start) continue;
          out.append(text, last, start - last).append(step->text);
          last = end;
        }
        out.append(text, last, text.length() - last);
        text = std::move(out);
        break;
      }
    }
  }
}

// ---- PreTokenizer

struct PreTokenizer::Step {
  enum Kind { kSplit, kByteLevel, kMetaspace, kDigits } kind;
  std::unique_ptr<icu::RegexPattern> pattern;  // kSplit, kByteLevel (null: no regex), kDigits
  bool invert = false;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool add_prefix_space = false;   // kByteLevel
  icu::UnicodeString replacement;  // kMetaspace (its pattern: null unless it splits)
  enum Prepend { kAlways, kFirst, kNever } prepend = kAlways;
};

absl::Status PreTokenizer::Parse(const Json& json) {
  if (json.is_null()) return absl::OkStatus();
  if (TypeOf(json) != "Sequence") return ParseOne(json, "pre_tokenizer");
  auto parts = json.find("pretokenizers");
  if (parts == json.end() || !parts->is_array()) {
    return Invalid("pre_tokenizer.pretokenizers", "missing or not an array");
  }
  for (size_t i = 0; i < parts->size(); ++i) {
    if (byte_level_) {
      return Invalid(absl::StrCat("pre_tokenizer.pretokenizers[", i, "]"),
                     "a step after ByteLevel is not supported");
    }
    auto s = ParseOne((*parts)[i], absl::StrCat("pre_tokenizer.pretokenizers[", i, "]"));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status PreTokenizer::ParseOne(const Json& json, const std::string& where) {
  const std::string type = TypeOf(json);
  auto step = std::make_shared<Step>();
  if (type == "Split") {
    step->kind = Step::kSplit;
    auto behavior = ParseBehavior(json, where);
    if (!behavior.ok()) return behavior.status();
    absl::StatusOr<bool> invert = BoolAt(json, "invert", false, where);
    if (!invert.ok()) return invert.status();
    auto pattern = CompilePattern(json.value("pattern", Json()), where);
    if (!pattern.ok()) return pattern.status();
    step->behavior = *behavior;
    step->invert = *invert;
    step->pattern = *std::move(pattern);
  } else if (type == "ByteLevel") {
    step->kind = Step::kByteLevel;
    absl::StatusOr<bool> prefix = BoolAt(json, "add_prefix_space", true, where);
    if (!prefix.ok()) return prefix.status();
    absl::StatusOr<bool> use_regex = BoolAt(json, "use_regex", true, where);
    if (!use_regex.ok()) return use_regex.status();
    step->add_prefix_space = *prefix;
    if (*use_regex) {
      auto compiled = Compile(icu::UnicodeString::fromUTF8(kByteLevelPattern), where);
      if (!compiled.ok()) return compiled.status();
      step->pattern = *std::move(compiled);
    }
    byte_level_ = true;
  } else if (type == "Metaspace") {
    step->kind = Step::kMetaspace;
    absl::StatusOr<std::string> replacement = StringAt(json, "replacement", where);
    if (!replacement.ok()) return replacement.status();
    step->replacement = icu::UnicodeString::fromUTF8(*replacement);
    if (step->replacement.countChar32() != 1) {
      return Invalid(absl::StrCat(where, ".replacement"), "must be one character");
    }
    absl::StatusOr<bool> split = BoolAt(json, "split", true, where);
    if (!split.ok()) return split.status();
    if (*split) {
      std::string quoted = absl::StrCat("\\Q", *replacement, "\\E");
      auto compiled = Compile(icu::UnicodeString::fromUTF8(quoted), where);
      if (!compiled.ok()) return compiled.status();
      step->pattern = *std::move(compiled);  // splits before each replacement
    }
    absl::StatusOr<std::string> scheme = PrependScheme(json, where);
    if (!scheme.ok()) return scheme.status();
    step->prepend = *scheme == "always"  ? Step::kAlways
                    : *scheme == "first" ? Step::kFirst
                                         : Step::kNever;
  } else if (type == "Digits") {
    step->kind = Step::kDigits;
    absl::StatusOr<bool> individual = BoolAt(json, "individual_digits", false, where);
    if (!individual.ok()) return individual.status();
    auto compiled =
        Compile(icu::UnicodeString::fromUTF8(*individual ? "\\p{N}" : "\\p{N}+"), where);
    if (!compiled.ok()) return compiled.status();
    step->pattern = *std::move(compiled);
  } else {
    return Invalid(where, absl::StrCat("\"", type, "\" is not supported (Split, ByteLevel, ",
                                       "Metaspace, Digits or a Sequence of them)"));
  }
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

void PreTokenizer::Apply(const icu::UnicodeString& stretch, bool at_text_start,
                         std::vector<std::string>& words) const {
  std::vector<icu::UnicodeString> pieces{stretch};
  for (const auto& step : steps_) {
    switch (step->kind) {
      case Step::kSplit:
        SplitPieces(*step->pattern, step->invert, step->behavior, pieces);
        break;
      case Step::kDigits:
        SplitPieces(*step->pattern, false, SplitBehavior::kIsolated, pieces);
        break;
      case Step::kByteLevel:
        for (icu::UnicodeString& piece : pieces) {
          if (step->add_prefix_space && !piece.startsWith(icu::UnicodeString(u' '))) {
            piece.insert(0, u' ');
          }
        }
        if (step->pattern) SplitPieces(*step->pattern, false, SplitBehavior::kIsolated, pieces);
        break;
      case Step::kMetaspace: {
        for (size_t i = 0; i < pieces.size(); ++i) {
          icu::UnicodeString& piece = pieces[i];
          piece.findAndReplace(icu::UnicodeString(u' '), step->replacement);
          const bool prepend = step->prepend == Step::kAlways ||
                               (step->prepend == Step::kFirst && at_text_start && i == 0);
          if (prepend && !piece.startsWith(step->replacement)) piece.insert(0, step->replacement);
        }
        if (step->pattern)
          SplitPieces(*step->pattern, false, SplitBehavior::kMergedWithNext, pieces);
        break;
      }
    }
  }
  const std::vector<std::string>& byte_chars = ByteCharacters();
  for (const icu::UnicodeString& piece : pieces) {
    if (piece.isEmpty()) continue;
    std::string utf8;
    piece.toUTF8String(utf8);
    if (!byte_level_) {
      words.push_back(std::move(utf8));
      continue;
    }
    std::string mapped;
    mapped.reserve(utf8.size() * 2);
    for (unsigned char byte : utf8) mapped += byte_chars[byte];
    words.push_back(std::move(mapped));
  }
}

// ---- Decoder

absl::Status Decoder::Parse(const Json& json) {
  if (json.is_null()) return absl::OkStatus();
  if (TypeOf(json) != "Sequence") return ParseOne(json, "decoder");
  auto parts = json.find("decoders");
  if (parts == json.end() || !parts->is_array()) {
    return Invalid("decoder.decoders", "missing or not an array");
  }
  bool fused = false;
  for (size_t i = 0; i < parts->size(); ++i) {
    const std::string where = absl::StrCat("decoder.decoders[", i, "]");
    const Json& part = (*parts)[i];
    const std::string type = TypeOf(part);
    if (type == "Fuse") {
      fused = true;
      continue;
    }
    if (type == "Strip") {
      // After Fuse the text is one piece: Strip takes spaces from its ends.
      // Compared as JSON values: a field of another type is simply unequal.
      auto is = [&part](const char* key, const Json& want) {
        auto it = part.find(key);
        return it != part.end() && *it == want;
      };
      const bool leading_space = is("content", Json(" ")) && is("start", Json(1)) &&
                                 (!part.contains("stop") || is("stop", Json(0)));
      if (!fused || !leading_space) {
        return Invalid(where, "only Strip of one leading space after Fuse is supported");
      }
      strips_leading_space_ = true;
      continue;
    }
    if (auto s = ParseOne(part, where); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Decoder::ParseOne(const Json& json, const std::string& where) {
  const std::string type = TypeOf(json);
  if (type == "ByteLevel") {
    byte_level_ = true;
  } else if (type == "ByteFallback") {
    byte_fallback_ = true;
  } else if (type == "Replace") {
    const Json pattern = json.value("pattern", Json());
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string()) {
      return Invalid(absl::StrCat(where, ".pattern"), "only a {\"String\": ...} is supported");
    }
    absl::StatusOr<std::string> content = StringAt(json, "content", where);
    if (!content.ok()) return content.status();
    replacements_.emplace_back(pattern["String"].get<std::string>(), *content);
  } else if (type == "Metaspace") {
    absl::StatusOr<std::string> replacement = StringAt(json, "replacement", where);
    if (!replacement.ok()) return replacement.status();
    replacements_.emplace_back(*replacement, " ");
    absl::StatusOr<std::string> scheme = PrependScheme(json, where);
    if (!scheme.ok()) return scheme.status();
    strips_leading_space_ = *scheme != "never";
  } else {
    return Invalid(where, absl::StrCat("\"", type, "\" is not supported (ByteLevel, Metaspace, ",
                                       "or a Sequence of Replace, ByteFallback, Fuse, Strip)"));
  }
  return absl::OkStatus();
}

std::string Decoder::TokenBytes(const std::string& token) const {
  std::string text = token;
  for (const auto& [from, to] : replacements_) {
    if (from.empty()) continue;
    std::string out;
    for (size_t at = 0;;) {
      const size_t found = text.find(from, at);
      out.append(text, at, found == std::string::npos ? std::string::npos : found - at);
      if (found == std::string::npos) break;
      out += to;
      at = found + from.size();
    }
    text = std::move(out);
  }
  if (byte_fallback_) {
    if (const int byte = ByteFallbackValue(text); byte >= 0) return std::string(1, char(byte));
  }
  if (!byte_level_) return text;
  // The ByteLevel decoder: every character back to its byte, or the
  // token's own UTF-8 if one has none.
  static const auto* byte_of = [] {
    auto* map = new absl::flat_hash_map<std::string, char>;
    for (int b = 0; b < 256; ++b) (*map)[ByteCharacters()[b]] = static_cast<char>(b);
    return map;
  }();
  const icu::UnicodeString chars = icu::UnicodeString::fromUTF8(text);
  std::string bytes;
  for (int32_t at = 0; at < chars.length();) {
    std::string one;
    const UChar32 c = chars.char32At(at);
    icu::UnicodeString(c).toUTF8String(one);
    auto it = byte_of->find(one);
    if (it == byte_of->end()) return text;
    bytes.push_back(it->second);
    at += U16_LENGTH(c);
  }
  return bytes;
}

}  // namespace attn::hf
