// The GBNF parser: text into GrammarBuilder rules.
#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/grammar/grammar.h"
#include "model/grammar/grammar_builder.h"
#include "util/utf8.h"

namespace attn::grammar {
namespace {

bool IsNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
}

class GbnfParser {
 public:
  GbnfParser(absl::string_view text, const GrammarLimits& limits)
      : text_(text), limits_(limits), builder_(limits) {}

  absl::StatusOr<Grammar> Parse() {
    if (text_.size() > limits_.max_text_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("grammar: longer than ", limits_.max_text_bytes, " bytes"));
    }
    if (!IsValidUtf8(std::string_view(text_.data(), text_.size())))
      return absl::InvalidArgumentError("grammar: not valid UTF-8");
    SkipSpace();
    while (pos_ < text_.size()) {
      const int line = line_;
      std::string name = ParseName();
      if (name.empty()) return Error("expected a rule name");
      SkipSpace();
      if (text_.substr(pos_, 3) != "::=") return Error(absl::StrCat("expected ::= after ", name));
      pos_ += 3;
      rule_name_ = name;
      auto alternatives = ParseAlternatives(0);
      if (!alternatives.ok()) return alternatives.status();
      auto status = builder_.Define(builder_.RuleId(name), *std::move(alternatives), line);
      if (!status.ok()) return status;
      SkipSpace();
    }
    return builder_.Build();
  }

 private:
  using Sequence = GrammarBuilder::Sequence;
  using Item = GrammarBuilder::Item;

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("grammar line ", line_, ": ", what));
  }

  void SkipSpace() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        if (c == '\n') ++line_;
        ++pos_;
      } else {
        return;
      }
    }
  }

  std::string ParseName() {
    const size_t start = pos_;
    while (pos_ < text_.size() && IsNameChar(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  // Whether a `name ::=` starts here: the end of the rule before it.
  bool AtRuleStart() const {
    size_t p = pos_;
    while (p < text_.size() && IsNameChar(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t')) ++p;
    return text_.substr(p, 3) == "::=";
  }

  absl::StatusOr<std::vector<Sequence>> ParseAlternatives(int depth) {
    if (depth > limits_.max_nesting) {
      return Error(absl::StrCat("groups nested deeper than ", limits_.max_nesting));
    }
    std::vector<Sequence> alternatives;
    while (true) {
      auto seq = ParseSequence(depth);
      if (!seq.ok()) return seq.status();
      alternatives.push_back(*std::move(seq));
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == '|') {
        ++pos_;
        continue;
      }
      return alternatives;
    }
  }

  absl::StatusOr<Sequence> ParseSequence(int depth) {
    Sequence seq;
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] == '|' || text_[pos_] == ')') return seq;
      if (depth == 0 && AtRuleStart()) return seq;
      auto term = ParseTerm(depth);
      if (!term.ok()) return term.status();
      auto repeated = ParsePostfix(*std::move(term));
      if (!repeated.ok()) return repeated.status();
      seq.insert(seq.end(), repeated->begin(), repeated->end());
    }
  }

  absl::StatusOr<Sequence> ParseTerm(int depth) {
    const char c = text_[pos_];
    if (c == '"') return ParseLiteral();
    if (c == '[') return ParseClass();
    if (c == '.') {
      ++pos_;
      return Sequence{Item{false, 0, NormalizeRanges({}, true)}};
    }
    if (c == '(') {
      ++pos_;
      auto alternatives = ParseAlternatives(depth + 1);
      if (!alternatives.ok()) return alternatives.status();
      if (pos_ >= text_.size() || text_[pos_] != ')') return Error("missing )");
      ++pos_;
      const uint32_t rule = builder_.NewRule(rule_name_);
      auto status = builder_.Define(rule, *std::move(alternatives), line_);
      if (!status.ok()) return status;
      return Sequence{Item{true, rule, {}}};
    }
    if (IsNameChar(c)) return Sequence{Item{true, builder_.RuleId(ParseName()), {}}};
    return Error(absl::StrFormat("unexpected character '%c'", c));
  }

  absl::StatusOr<Sequence> ParsePostfix(Sequence term) {
    if (pos_ >= text_.size()) return term;
    int64_t min = 0, max = -1;
    const char c = text_[pos_];
    if (c == '*') {
      ++pos_;
    } else if (c == '+') {
      ++pos_;
      min = 1;
    } else if (c == '?') {
      ++pos_;
      max = 1;
    } else if (c == '{') {
      auto bounds = ParseBounds();
      if (!bounds.ok()) return bounds.status();
      std::tie(min, max) = *bounds;
    } else {
      return term;
    }
    Item item = term.size() == 1 ? term[0] : Item{};
    if (term.size() != 1) {
      item = Item{true, builder_.NewRule(rule_name_), {}};
      auto status = builder_.Define(item.rule, {std::move(term)}, line_);
      if (!status.ok()) return status;
    }
    return builder_.Repeat(item, min, max, rule_name_);
  }

  absl::StatusOr<std::pair<int64_t, int64_t>> ParseBounds() {
    ++pos_;  // {
    auto number = [&]() -> int64_t {
      int64_t n = -1;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        n = (n < 0 ? 0 : n) * 10 + (text_[pos_++] - '0');
        if (n > limits_.max_repetition) n = limits_.max_repetition + 1;
      }
      return n;
    };
    SkipSpace();
    const int64_t min = number();
    if (min < 0) return Error("expected a number after {");
    int64_t max = min;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == ',') {
      ++pos_;
      SkipSpace();
      max = number();  // -1: unbounded
      SkipSpace();
    }
    if (pos_ >= text_.size() || text_[pos_] != '}') return Error("expected } after a repetition");
    ++pos_;
    if (max >= 0 && max < min) return Error("a repetition's maximum is below its minimum");
    return std::make_pair(min, max);
  }

  // One character of a literal or class, escapes decoded.
  absl::StatusOr<uint32_t> ParseChar() {
    if (pos_ >= text_.size()) return Error("unexpected end of the grammar");
    const unsigned char c = text_[pos_];
    if (c == '\\') return ParseEscape();
    if (c == '\n') return Error("a line break inside a literal or class");
    // A whole UTF-8 character (the text is valid UTF-8).
    const int length = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t value = length == 1 ? c : c & (0x7F >> length);
    for (int i = 1; i < length; ++i) value = (value << 6) | (text_[pos_ + i] & 0x3F);
    pos_ += length;
    return value;
  }

  absl::StatusOr<uint32_t> ParseEscape() {
    ++pos_;
    if (pos_ >= text_.size()) return Error("a \\ at the end of the grammar");
    const char c = text_[pos_++];
    int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (digits == 0) {
      switch (c) {
        case 'n':
          return uint32_t{'\n'};
        case 't':
          return uint32_t{'\t'};
        case 'r':
          return uint32_t{'\r'};
        default:
          if (std::isalnum(static_cast<unsigned char>(c))) {
            return Error(absl::StrFormat("unknown escape \\%c", c));
          }
          return static_cast<uint32_t>(static_cast<unsigned char>(c));
      }
    }
    uint32_t value = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      const char h = pos_ < text_.size() ? text_[pos_] : 0;
      if (!std::isxdigit(static_cast<unsigned char>(h))) return Error("a bad hexadecimal escape");
      value = value * 16 + (std::isdigit(static_cast<unsigned char>(h))
                                ? h - '0'
                                : std::tolower(static_cast<unsigned char>(h)) - 'a' + 10);
    }
    if (value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) {
      return Error("an escape that is not a Unicode scalar value");
    }
    return value;
  }

  absl::StatusOr<Sequence> ParseLiteral() {
    ++pos_;  // "
    Sequence seq;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      auto c = ParseChar();
      if (!c.ok()) return c.status();
      seq.push_back(Item{false, 0, {{*c, *c}}});
    }
    if (pos_ >= text_.size()) return Error("unterminated literal");
    ++pos_;
    if (auto status = builder_.Charge(static_cast<int64_t>(seq.size())); !status.ok()) {
      return status;
    }
    return seq;
  }

  absl::StatusOr<Sequence> ParseClass() {
    ++pos_;  // [
    bool negate = false;
    if (pos_ < text_.size() && text_[pos_] == '^') {
      negate = true;
      ++pos_;
    }
    CodeRanges ranges;
    while (pos_ < text_.size() && text_[pos_] != ']') {
      auto lo = ParseChar();
      if (!lo.ok()) return lo.status();
      uint32_t hi = *lo;
      if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        auto end = ParseChar();
        if (!end.ok()) return end.status();
        hi = *end;
        if (hi < *lo) return Error("a class range whose end is below its start");
      }
      ranges.emplace_back(*lo, hi);
    }
    if (pos_ >= text_.size()) return Error("unterminated character class");
    ++pos_;
    ranges = NormalizeRanges(std::move(ranges), negate);
    if (ranges.empty()) return Error("a character class that matches nothing");
    return Sequence{Item{false, 0, std::move(ranges)}};
  }

  absl::string_view text_;
  GrammarLimits limits_;
  GrammarBuilder builder_;
  size_t pos_ = 0;
  int line_ = 1;
  std::string rule_name_;
};

}  // namespace

absl::StatusOr<Grammar> Grammar::FromGbnf(absl::string_view text, const GrammarLimits& limits) {
  return GbnfParser(text, limits).Parse();
}

std::string GbnfLiteral(absl::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7F) {
      out += absl::StrFormat("\\x%02X", u);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace attn::grammar
