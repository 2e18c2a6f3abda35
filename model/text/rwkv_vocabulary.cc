#include "model/text/rwkv_vocabulary.h"

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "util/utf8.h"

namespace attn {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The value of `digits` hex digits at body[at], or -1.
int64_t HexAt(absl::string_view body, size_t at, size_t digits) {
  if (at + digits > body.size()) return -1;
  int64_t value = 0;
  for (size_t i = 0; i < digits; ++i) {
    const int d = HexValue(body[at + i]);
    if (d < 0) return -1;
    value = value * 16 + d;
  }
  return value;
}

void AppendUtf8(uint32_t code, std::string* out) {
  if (code < 0x80) {
    out->push_back(static_cast<char>(code));
  } else if (code < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (code >> 6)));
    out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
  } else if (code < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (code >> 12)));
    out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (code >> 18)));
    out->push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
  }
}

// One escape at body[at] (just after the backslash); appends its bytes and
// returns how many characters it took, or an error.
absl::StatusOr<size_t> Escape(absl::string_view body, size_t at, bool bytes, std::string* out) {
  if (at >= body.size()) return absl::InvalidArgumentError("a backslash ends the literal");
  static const std::map<char, char> kSimple = {{'\\', '\\'}, {'\'', '\''}, {'"', '"'},  {'a', '\a'},
                                               {'b', '\b'},  {'f', '\f'},  {'n', '\n'}, {'r', '\r'},
                                               {'t', '\t'},  {'v', '\v'}};
  const char c = body[at];
  if (auto it = kSimple.find(c); it != kSimple.end()) {
    out->push_back(it->second);
    return 1;
  }
  if (c >= '0' && c <= '7') {  // up to three octal digits
    size_t n = 0;
    int value = 0;
    while (n < 3 && at + n < body.size() && body[at + n] >= '0' && body[at + n] <= '7') {
      value = value * 8 + (body[at + n] - '0');
      ++n;
    }
    if (bytes && value > 255) return absl::InvalidArgumentError("an octal escape past 0o377");
    if (bytes) {
      out->push_back(static_cast<char>(value));
    } else {
      AppendUtf8(static_cast<uint32_t>(value), out);
    }
    return n;
  }
  if (c == 'x') {
    const int64_t value = HexAt(body, at + 1, 2);
    if (value < 0) return absl::InvalidArgumentError("\\x needs two hex digits");
    if (bytes) {
      out->push_back(static_cast<char>(value));
    } else {
      AppendUtf8(static_cast<uint32_t>(value), out);
    }
    return 3;
  }
  if (!bytes && (c == 'u' || c == 'U')) {
    const size_t digits = c == 'u' ? 4 : 8;
    const int64_t value = HexAt(body, at + 1, digits);
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("\\", std::string(1, c), " needs ", digits, " hex digits"));
    }
    if (value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) {
      return absl::InvalidArgumentError(
          absl::StrCat("U+", absl::Hex(value), " is no character UTF-8 can hold"));
    }
    AppendUtf8(static_cast<uint32_t>(value), out);
    return 1 + digits;
  }
  if (!bytes && c == 'N') return absl::InvalidArgumentError("\\N{...} escapes are not supported");
  out->push_back('\\');  // Python keeps an unknown escape as it is
  return 0;
}

}  // namespace

absl::StatusOr<std::string> ParsePythonLiteral(absl::string_view literal) {
  size_t prefix = 0;
  bool bytes = false, raw = false;
  while (prefix < literal.size() && prefix < 2 &&
         std::string("bBrRuU").find(literal[prefix]) != std::string::npos) {
    const char c = absl::ascii_tolower(literal[prefix]);
    bytes |= c == 'b';
    raw |= c == 'r';
    ++prefix;
  }
  const absl::string_view quoted = literal.substr(prefix);
  if (quoted.size() < 2 || (quoted[0] != '\'' && quoted[0] != '"') || quoted.back() != quoted[0]) {
    return absl::InvalidArgumentError("not a quoted Python string or bytes literal");
  }
  const absl::string_view body = quoted.substr(1, quoted.size() - 2);
  std::string out;
  for (size_t at = 0; at < body.size();) {
    const char c = body[at];
    if (bytes && static_cast<unsigned char>(c) >= 0x80) {
      return absl::InvalidArgumentError("a bytes literal holds a character outside ASCII");
    }
    if (c == quoted[0]) return absl::InvalidArgumentError("an unescaped quote inside the literal");
    if (c != '\\' || raw) {
      out.push_back(c);
      ++at;
      continue;
    }
    absl::StatusOr<size_t> taken = Escape(body, at + 1, bytes, &out);
    if (!taken.ok()) return taken.status();
    at += 1 + *taken;
  }
  if (!bytes && !IsValidUtf8(out)) return absl::InvalidArgumentError("not valid UTF-8");
  return out;
}

absl::StatusOr<RwkvVocabulary> RwkvVocabulary::Parse(absl::string_view text) {
  RwkvVocabulary vocab;
  vocab.text_ = std::string(text);
  vocab.trie_.emplace_back();
  std::map<std::string, int64_t> ids_of;
  int64_t number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    auto problem = [number](const auto&... what) {
      return absl::InvalidArgumentError(absl::StrCat("line ", number, ": ", what...));
    };
    const size_t first = line.find(' '), last = line.rfind(' ');
    if (first == absl::string_view::npos || first == last) {
      return problem("expected ID LITERAL BYTE_LENGTH");
    }
    int64_t id = 0, length = 0;
    if (!absl::SimpleAtoi(line.substr(0, first), &id) || id < 1 || id > (1 << 24)) {
      return problem("the id is not a number from 1 to 16777216");
    }
    if (!absl::SimpleAtoi(line.substr(last + 1), &length)) {
      return problem("the byte length is not a number");
    }
    absl::StatusOr<std::string> bytes =
        ParsePythonLiteral(absl::StripAsciiWhitespace(line.substr(first + 1, last - first - 1)));
    if (!bytes.ok()) return problem(bytes.status().message());
    if (static_cast<int64_t>(bytes->size()) != length || bytes->empty()) {
      return problem("the literal has ", bytes->size(), " bytes, the line says ", length);
    }
    if (id < vocab.size() && !vocab.tokens_[id].empty()) return problem("id ", id, " again");
    if (auto [it, fresh] = ids_of.emplace(*bytes, id); !fresh) {
      return problem("the same bytes as id ", it->second);
    }
    if (id >= vocab.size()) vocab.tokens_.resize(id + 1);
    vocab.tokens_[id] = *bytes;
    vocab.Insert(*bytes, id);
  }
  if (vocab.tokens_.empty()) vocab.tokens_.resize(1);  // id 0 alone
  for (int byte = 0; byte < 256; ++byte) {
    if (!ids_of.count(std::string(1, static_cast<char>(byte)))) {
      return absl::InvalidArgumentError(
          absl::StrCat("no token holds the single byte 0x", absl::Hex(byte, absl::kZeroPad2),
                       "; every byte needs one so that any text encodes"));
    }
  }
  return vocab;
}

int32_t RwkvVocabulary::Child(int32_t node, uint8_t byte) const {
  const auto& children = trie_[node].children;
  auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1}));
  return it != children.end() && it->first == byte ? it->second : -1;
}

void RwkvVocabulary::Insert(const std::string& bytes, int64_t id) {
  int32_t node = 0;
  for (unsigned char byte : bytes) {
    int32_t next = Child(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(trie_.size());
      trie_.emplace_back();
      auto& children = trie_[node].children;
      children.insert(
          std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1})),
          {byte, next});
    }
    node = next;
  }
  trie_[node].id = id;
}

std::vector<int64_t> RwkvVocabulary::Encode(absl::string_view bytes) const {
  std::vector<int64_t> ids;
  for (size_t at = 0; at < bytes.size();) {
    int64_t best = -1;
    size_t best_length = 0;
    int32_t node = 0;
    for (size_t i = at; i < bytes.size(); ++i) {
      node = Child(node, static_cast<uint8_t>(bytes[i]));
      if (node < 0) break;
      if (trie_[node].id >= 0) {
        best = trie_[node].id;
        best_length = i - at + 1;
      }
    }
    ids.push_back(best);  // every single byte has a token (Parse)
    at += best_length;
  }
  return ids;
}

const std::string& RwkvVocabulary::TokenBytes(int64_t id) const {
  static const std::string kNone;
  return id > 0 && id < size() ? tokens_[id] : kNone;
}

}  // namespace attn
