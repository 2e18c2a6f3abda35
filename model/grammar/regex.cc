#include "model/grammar/regex.h"

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/utf8.h"

namespace attn::grammar {
namespace {

std::string ClassChar(uint32_t c) {
  if (c < 0x80 && std::isalnum(static_cast<int>(c))) return std::string(1, static_cast<char>(c));
  if (c <= 0xFFFF) return absl::StrFormat("\\u%04X", c);
  return absl::StrFormat("\\U%08X", c);
}

std::string ClassText(const CodeRanges& ranges) {
  std::string out = "[";
  for (auto [lo, hi] : ranges) {
    out += ClassChar(lo);
    if (hi != lo) absl::StrAppend(&out, "-", ClassChar(hi));
  }
  return out + "]";
}

bool Contains(const CodeRanges& ranges, uint32_t c) {
  for (auto [lo, hi] : ranges) {
    if (c >= lo && c <= hi) return true;
  }
  return false;
}

CodeRanges Digits() { return {{'0', '9'}}; }
CodeRanges Word() {
  return NormalizeRanges({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}, false);
}
CodeRanges Space() {
  return NormalizeRanges({{'\t', '\r'},
                          {' ', ' '},
                          {0xA0, 0xA0},
                          {0x1680, 0x1680},
                          {0x2000, 0x200A},
                          {0x2028, 0x2029},
                          {0x202F, 0x202F},
                          {0x205F, 0x205F},
                          {0x3000, 0x3000},
                          {0xFEFF, 0xFEFF}},
                         false);
}
CodeRanges Complement(CodeRanges r) { return NormalizeRanges(std::move(r), true); }

class RegexParser {
 public:
  RegexParser(absl::string_view pattern, const RegexOptions& options)
      : p_(pattern), options_(options) {}

  absl::StatusOr<std::string> Parse() {
    if (!IsValidUtf8(std::string_view(p_.data(), p_.size())))
      return absl::InvalidArgumentError("regex: not valid UTF-8");
    bool anchored_start = false, anchored_end = false;
    if (!p_.empty() && p_[0] == '^') {
      anchored_start = true;
      ++i_;
    }
    auto body = ParseAlternation(0, &anchored_end);
    if (!body.ok()) return body.status();
    if (i_ < p_.size()) return Error("an unmatched )");
    std::string out = absl::StrCat("(", *body, ")");
    if (options_.search) {
      const std::string any =
          absl::StrCat("(", CharClassGbnf(Complement({}), options_.json_string), ")*");
      if (!anchored_start) out = absl::StrCat(any, " ", out);
      if (!anchored_end) absl::StrAppend(&out, " ", any);
    }
    return out;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("regex at offset ", i_, ": ", what));
  }
  bool AtEnd() const { return i_ >= p_.size(); }

  absl::StatusOr<std::string> ParseAlternation(int depth, bool* anchored_end) {
    if (depth > options_.max_nesting) return Error("groups nested too deeply");
    std::vector<std::string> alternatives;
    while (true) {
      auto seq = ParseSequence(depth, anchored_end);
      if (!seq.ok()) return seq.status();
      alternatives.push_back(seq->empty() ? "\"\"" : *seq);
      if (!AtEnd() && p_[i_] == '|') {
        ++i_;
        continue;
      }
      std::string out;
      for (size_t a = 0; a < alternatives.size(); ++a) {
        absl::StrAppend(&out, a ? " | " : "", alternatives[a]);
      }
      return out;
    }
  }

  absl::StatusOr<std::string> ParseSequence(int depth, bool* anchored_end) {
    std::string seq;
    while (!AtEnd() && p_[i_] != '|' && p_[i_] != ')') {
      if (p_[i_] == '$') {
        ++i_;
        if (depth != 0 || (!AtEnd() && p_[i_] != '|'))
          return Error("$ is only supported at the end");
        *anchored_end = true;
        continue;
      }
      if (p_[i_] == '^') return Error("^ is only supported at the start");
      auto atom = ParseAtom(depth);
      if (!atom.ok()) return atom.status();
      auto quantified = ParseQuantifier(*std::move(atom));
      if (!quantified.ok()) return quantified.status();
      absl::StrAppend(&seq, seq.empty() ? "" : " ", *quantified);
    }
    return seq;
  }

  absl::StatusOr<std::string> ParseAtom(int depth) {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (p_.substr(i_, 2) == "?:") {
        i_ += 2;
      } else if (p_.substr(i_, 2) == "?<" && p_.substr(i_, 3) != "?<=" &&
                 p_.substr(i_, 3) != "?<!") {
        const size_t close = p_.find('>', i_);
        if (close == absl::string_view::npos) return Error("an unterminated group name");
        i_ = close + 1;
      } else if (!AtEnd() && p_[i_] == '?') {
        return Error("look-arounds are not supported");
      }
      bool unused = false;
      auto inner = ParseAlternation(depth + 1, &unused);
      if (!inner.ok()) return inner.status();
      if (AtEnd() || p_[i_] != ')') return Error("a missing )");
      ++i_;
      return absl::StrCat("(", *inner, ")");
    }
    if (c == '[') return ParseClass();
    if (c == '.') {
      ++i_;
      return Class(Complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
    }
    if (c == '*' || c == '+' || c == '?' || c == '{')
      return Error("a quantifier with nothing before it");
    if (c == '\\') {
      auto chars = ParseEscape(false);
      if (!chars.ok()) return chars.status();
      return Class(*chars);
    }
    const uint32_t cp = NextChar();
    return Class({{cp, cp}});
  }

  absl::StatusOr<std::string> Class(const CodeRanges& chars) {
    std::string text = CharClassGbnf(chars, options_.json_string);
    if (text.empty()) return Error("a character class that matches nothing a string can hold");
    return absl::StrCat("(", text, ")");
  }

  uint32_t NextChar() {
    const auto c = static_cast<unsigned char>(p_[i_]);
    const int length = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t value = length == 1 ? c : c & (0x7F >> length);
    for (int k = 1; k < length; ++k) value = (value << 6) | (p_[i_ + k] & 0x3F);
    i_ += length;
    return value;
  }

  absl::StatusOr<uint32_t> Hex(int digits) {
    uint32_t value = 0;
    for (int k = 0; k < digits; ++k, ++i_) {
      const char h = AtEnd() ? 0 : p_[i_];
      if (!std::isxdigit(static_cast<unsigned char>(h))) return Error("a bad hexadecimal escape");
      value = value * 16 + (std::isdigit(static_cast<unsigned char>(h))
                                ? h - '0'
                                : std::tolower(static_cast<unsigned char>(h)) - 'a' + 10);
    }
    return value;
  }

  // After a backslash: the characters it stands for.
  absl::StatusOr<CodeRanges> ParseEscape(bool in_class) {
    ++i_;
    if (AtEnd()) return Error("a \\ at the end");
    const char c = p_[i_++];
    switch (c) {
      case 'd':
        return Digits();
      case 'D':
        return Complement(Digits());
      case 'w':
        return Word();
      case 'W':
        return Complement(Word());
      case 's':
        return Space();
      case 'S':
        return Complement(Space());
      case 'n':
        return CodeRanges{{'\n', '\n'}};
      case 't':
        return CodeRanges{{'\t', '\t'}};
      case 'r':
        return CodeRanges{{'\r', '\r'}};
      case 'f':
        return CodeRanges{{'\f', '\f'}};
      case 'v':
        return CodeRanges{{'\v', '\v'}};
      case '0':
        return CodeRanges{{0, 0}};
      case 'b':
        if (in_class) return CodeRanges{{'\b', '\b'}};
        return Error("word boundaries are not supported");
      case 'x':
      case 'u': {
        auto value = Hex(c == 'x' ? 2 : 4);
        if (!value.ok()) return value.status();
        return NormalizeRanges({{*value, *value}}, false);
      }
      default:
        if (std::isalnum(static_cast<unsigned char>(c))) {
          return Error(absl::StrFormat("the escape \\%c is not supported", c));
        }
        --i_;
        const uint32_t cp = NextChar();
        return CodeRanges{{cp, cp}};
    }
  }

  absl::StatusOr<std::string> ParseClass() {
    ++i_;  // [
    bool negate = false;
    if (!AtEnd() && p_[i_] == '^') {
      negate = true;
      ++i_;
    }
    CodeRanges ranges;
    bool first = true;
    while (!AtEnd() && (p_[i_] != ']' || first)) {
      first = false;
      CodeRanges lo;
      if (p_[i_] == '\\') {
        auto chars = ParseEscape(true);
        if (!chars.ok()) return chars.status();
        lo = *chars;
      } else {
        const uint32_t cp = NextChar();
        lo = {{cp, cp}};
      }
      if (lo.size() == 1 && lo[0].first == lo[0].second && i_ + 1 < p_.size() && p_[i_] == '-' &&
          p_[i_ + 1] != ']') {
        ++i_;
        uint32_t hi = 0;
        if (p_[i_] == '\\') {
          auto chars = ParseEscape(true);
          if (!chars.ok()) return chars.status();
          if (chars->size() != 1 || (*chars)[0].first != (*chars)[0].second) {
            return Error("a class range ending in a class");
          }
          hi = (*chars)[0].first;
        } else {
          hi = NextChar();
        }
        if (hi < lo[0].first) return Error("a class range whose end is below its start");
        lo[0].second = hi;
      }
      ranges.insert(ranges.end(), lo.begin(), lo.end());
    }
    if (AtEnd()) return Error("an unterminated class");
    ++i_;
    return Class(NormalizeRanges(std::move(ranges), negate));
  }

  absl::StatusOr<std::string> ParseQuantifier(std::string atom) {
    if (AtEnd()) return atom;
    std::string suffix;
    const char c = p_[i_];
    if (c == '*' || c == '+' || c == '?') {
      suffix = std::string(1, c);
      ++i_;
    } else if (c == '{') {
      const size_t close = p_.find('}', i_);
      if (close == absl::string_view::npos) return Error("an unterminated {");
      const absl::string_view inside = p_.substr(i_ + 1, close - i_ - 1);
      // {m}, {m,} or {m,n}.
      const size_t comma = inside.find(',');
      auto digits = [](absl::string_view d) {
        return !d.empty() && d.size() <= 6 &&
               std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
      };
      const absl::string_view min = inside.substr(0, comma);
      const absl::string_view max =
          comma == absl::string_view::npos ? absl::string_view("0") : inside.substr(comma + 1);
      if (!digits(min) || (!max.empty() && !digits(max))) {
        return Error("a repetition must be {m}, {m,} or {m,n}");
      }
      const int low = std::stoi(std::string(min));
      const int high = max.empty() ? low : std::stoi(std::string(max));
      if (low > 1000 || high > 1000) return Error("a repetition bound above 1000");
      if (comma != absl::string_view::npos && !max.empty() && high < low) {
        return Error("a repetition's maximum is below its minimum");
      }
      suffix = absl::StrCat("{", inside, "}");
      i_ = close + 1;
    } else {
      return atom;
    }
    if (!AtEnd() && p_[i_] == '?') ++i_;  // lazy: the same strings
    if (!AtEnd() && (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '{')) {
      return Error("a quantifier after a quantifier");
    }
    return absl::StrCat(atom, suffix);
  }

  absl::string_view p_;
  RegexOptions options_;
  size_t i_ = 0;
};

}  // namespace

std::string CharClassGbnf(const CodeRanges& chars, bool json_string) {
  if (!json_string) return chars.empty() ? std::string() : ClassText(chars);
  // Inside a JSON string: " \ and controls only escaped.
  std::vector<std::string> alternatives;
  CodeRanges plain;
  for (auto [lo, hi] : chars) {
    for (uint32_t start = lo; start <= hi;) {
      if (start < 0x20 || start == '"' || start == '\\') {
        ++start;
        continue;
      }
      uint32_t end = start;
      while (end < hi && end + 1 >= 0x20 && end + 1 != '"' && end + 1 != '\\') ++end;
      plain.emplace_back(start, end);
      if (end == 0x10FFFF) break;
      start = end + 1;
    }
  }
  if (!plain.empty()) alternatives.push_back(ClassText(plain));
  const std::pair<uint32_t, const char*> escaped[] = {
      {'"', "\"\\\\\\\"\""}, {'\\', "\"\\\\\\\\\""}, {'\n', "\"\\\\n\""}, {'\t', "\"\\\\t\""},
      {'\r', "\"\\\\r\""},   {'\b', "\"\\\\b\""},    {'\f', "\"\\\\f\""}};
  for (auto [c, text] : escaped) {
    if (Contains(chars, c)) alternatives.emplace_back(text);
  }
  std::string out;
  for (size_t a = 0; a < alternatives.size(); ++a)
    absl::StrAppend(&out, a ? " | " : "", alternatives[a]);
  return out;
}

absl::StatusOr<std::string> RegexToGbnf(absl::string_view pattern, const RegexOptions& options) {
  return RegexParser(pattern, options).Parse();
}

}  // namespace attn::grammar
