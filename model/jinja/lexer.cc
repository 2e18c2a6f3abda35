#include "model/jinja/lexer.h"

#include <cctype>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace attn::jinja {
absl::Status LineError(int line, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", message));
}

namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\v'; }

// Jinja2 lexes with \n only.
std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

void AppendUtf8(uint32_t code, std::string* out) {
  if (code >= 0xD800 && code <= 0xDFFF) code = 0xFFFD;  // a lone surrogate is not UTF-8
  if (code < 0x80) {
    *out += static_cast<char>(code);
  } else if (code < 0x800) {
    *out += static_cast<char>(0xC0 | (code >> 6));
    *out += static_cast<char>(0x80 | (code & 0x3F));
  } else if (code < 0x10000) {
    *out += static_cast<char>(0xE0 | (code >> 12));
    *out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (code & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (code >> 18));
    *out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (code & 0x3F));
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's unicode-escape decoding of a literal's body, non-ASCII kept.
void AppendEscape(std::string_view body, size_t* i, std::string* out) {
  char c = body[*i];
  static const char kSimple[] = "nrtabfv\\'\"";
  static const char kMeaning[] = "\n\r\t\a\b\f\v\\'\"";
  if (const char* p = std::strchr(kSimple, c); p != nullptr && c != '\0') {
    *out += kMeaning[p - kSimple];
    return;
  }
  int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
  if (digits > 0 && *i + digits < body.size()) {
    uint32_t code = 0;
    bool ok = true;
    for (int k = 1; ok && k <= digits; ++k) {
      int h = HexValue(body[*i + k]);
      ok = h >= 0;
      code = code * 16 + static_cast<uint32_t>(h < 0 ? 0 : h);
    }
    if (ok && code <= 0x10FFFF) {
      AppendUtf8(code, out);
      *i += digits;
      return;
    }
  }
  if (c >= '0' && c <= '7') {
    uint32_t code = 0;
    int k = 0;
    while (k < 3 && *i + k < body.size() && body[*i + k] >= '0' && body[*i + k] <= '7') {
      code = code * 8 + static_cast<uint32_t>(body[*i + k] - '0');
      ++k;
    }
    AppendUtf8(code, out);
    *i += k - 1;
    return;
  }
  *out += '\\';  // an unknown escape stays as written
  *out += c;
}

class TagLexer {
 public:
  TagLexer(std::string_view src, size_t pos, int line) : src_(src), pos_(pos), line_(line) {}

  // Tokens up to the closing delimiter `close` ("}}" or "%}") at bracket
  // depth zero; leaves pos() after it and says which modifier preceded it.
  absl::Status Run(std::string_view close, std::vector<Token>* tokens, char* modifier) {
    int depth = 0;
    while (true) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) {
        if (src_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= src_.size())
        return LineError(line_, absl::StrCat("missing '", std::string(close), "'"));
      std::string_view rest = src_.substr(pos_);
      if (depth == 0) {
        for (char m : {'-', '+'}) {
          if (rest.size() > close.size() && rest[0] == m && rest.substr(1, close.size()) == close) {
            *modifier = m;
            pos_ += 1 + close.size();
            return absl::OkStatus();
          }
        }
        if (rest.substr(0, close.size()) == close) {
          *modifier = 0;
          pos_ += close.size();
          return absl::OkStatus();
        }
      }
      absl::Status s = Next(tokens, &depth);
      if (!s.ok()) return s;
    }
  }

  size_t pos() const { return pos_; }
  int line() const { return line_; }

 private:
  absl::Status Next(std::vector<Token>* tokens, int* depth) {
    char c = src_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = pos_;
      while (pos_ < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) {
        ++pos_;
      }
      tokens->push_back({Token::Kind::kName, std::string(src_.substr(start, pos_ - start)), line_});
      return absl::OkStatus();
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return Number(tokens);
    if (c == '\'' || c == '"') return String(tokens);
    static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kTwo) {
      if (src_.substr(pos_, 2) == op) {
        tokens->push_back({Token::Kind::kOperator, op, line_});
        pos_ += 2;
        return absl::OkStatus();
      }
    }
    if (std::strchr("+-*/%~<>()[]{},.:|=", c) == nullptr || c == '\0') {
      return LineError(line_, absl::StrCat("unexpected character '", std::string(1, c), "'"));
    }
    if (c == '(' || c == '[' || c == '{') ++*depth;
    if ((c == ')' || c == ']' || c == '}') && *depth > 0) --*depth;
    tokens->push_back({Token::Kind::kOperator, std::string(1, c), line_});
    ++pos_;
    return absl::OkStatus();
  }

  absl::Status Number(std::vector<Token>* tokens) {
    size_t start = pos_;
    bool is_float = false;
    auto digits = [&] {
      while (pos_ < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) {
        ++pos_;
      }
    };
    digits();
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t save = pos_++;
      if (pos_ < src_.size() && (src_[pos_] == '+' || src_[pos_] == '-')) ++pos_;
      if (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) {
        is_float = true;
        digits();
      } else {
        pos_ = save;
      }
    }
    std::string text;
    for (char ch : src_.substr(start, pos_ - start)) {
      if (ch != '_') text += ch;
    }
    tokens->push_back({is_float ? Token::Kind::kFloat : Token::Kind::kInt, text, line_});
    return absl::OkStatus();
  }

  absl::Status String(std::vector<Token>* tokens) {
    char quote = src_[pos_];
    int line = line_;
    size_t i = pos_ + 1;
    std::string value;
    for (; i < src_.size() && src_[i] != quote; ++i) {
      if (src_[i] == '\n') ++line_;
      if (src_[i] == '\\' && i + 1 < src_.size()) {
        std::string_view body = src_;
        ++i;
        if (src_[i] == '\n') ++line_;
        AppendEscape(body, &i, &value);
      } else {
        value += src_[i];
      }
    }
    if (i >= src_.size()) return LineError(line, "unterminated string");
    pos_ = i + 1;
    tokens->push_back({Token::Kind::kString, std::move(value), line});
    return absl::OkStatus();
  }

  std::string_view src_;
  size_t pos_;
  int line_;
};

int CountLines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

class Splitter {
 public:
  explicit Splitter(std::string src) : src_(std::move(src)) {}

  absl::StatusOr<std::vector<Segment>> Run() {
    while (pos_ < src_.size()) {
      size_t open = FindOpen(pos_);
      std::string text = src_.substr(pos_, open - pos_);
      if (open == src_.size()) {
        AddText(std::move(text));
        break;
      }
      char kind = src_[open + 1];
      char modifier = open + 2 < src_.size() ? src_[open + 2] : 0;
      if (modifier != '-' && modifier != '+') modifier = 0;
      StripBefore(&text, kind, modifier);
      AddText(std::move(text));
      line_ += CountLines(src_.substr(pos_, open - pos_));
      pos_ = open + 2 + (modifier != 0 ? 1 : 0);
      absl::Status s = kind == '#' ? Comment() : Tag(kind);
      if (!s.ok()) return s;
    }
    return std::move(segments_);
  }

 private:
  size_t FindOpen(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return src_.size();
  }

  // "{%-" strips all white space before the tag; otherwise lstrip_blocks
  // strips the spaces that open the tag's line (not before "{{" or "{%+").
  void StripBefore(std::string* text, char kind, char modifier) const {
    if (modifier == '-') {
      size_t end = text->size();
      while (end > 0 && IsSpace((*text)[end - 1])) --end;
      text->resize(end);
      return;
    }
    if (modifier == '+' || kind == '{') return;
    size_t line_start = text->rfind('\n');
    line_start = line_start == std::string::npos ? 0 : line_start + 1;
    if (line_start == 0 && !line_starting_) return;
    if (line_start == text->size()) return;
    for (size_t i = line_start; i < text->size(); ++i) {
      if (!IsSpace((*text)[i])) return;
    }
    text->resize(line_start);
  }

  // What follows a closing delimiter: "-" strips all white space,
  // trim_blocks one newline after "%}" and "#}" unless "+".
  void StripAfter(char kind, char modifier) {
    size_t start = pos_;
    if (modifier == '-') {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) ++pos_;
    } else if (kind != '{' && modifier != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
    line_ += CountLines(std::string_view(src_).substr(start, pos_ - start));
    line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
  }

  absl::Status Comment() {
    size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) return LineError(line_, "unterminated comment");
    char modifier =
        end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    line_ += CountLines(std::string_view(src_).substr(pos_, end - pos_));
    pos_ = end + 2;
    StripAfter('#', modifier);
    return absl::OkStatus();
  }

  absl::Status Tag(char kind) {
    Segment segment{
        kind == '{' ? Segment::Kind::kOutput : Segment::Kind::kStatement, "", {}, line_};
    TagLexer lexer(src_, pos_, line_);
    char modifier = 0;
    absl::Status s = lexer.Run(kind == '{' ? "}}" : "%}", &segment.tokens, &modifier);
    if (!s.ok()) return s;
    pos_ = lexer.pos();
    line_ = lexer.line();
    bool raw = kind == '%' && segment.tokens.size() == 1 && segment.tokens[0].text == "raw" &&
               segment.tokens[0].kind == Token::Kind::kName;
    StripAfter(kind, modifier);
    if (raw) return Raw(segment.line);
    segments_.push_back(std::move(segment));
    return absl::OkStatus();
  }

  // {% raw %}...{% endraw %}: the text as written.
  absl::Status Raw(int line) {
    size_t search = pos_;
    while (true) {
      size_t open = src_.find("{%", search);
      if (open == std::string::npos) return LineError(line, "missing {% endraw %}");
      size_t i = open + 2;
      char modifier = i < src_.size() && (src_[i] == '-' || src_[i] == '+') ? src_[i++] : 0;
      while (i < src_.size() && IsSpace(src_[i])) ++i;
      if (src_.compare(i, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      std::string text = src_.substr(pos_, open - pos_);
      StripBefore(&text, '%', modifier);
      line_ += CountLines(text);
      AddText(std::move(text));
      TagLexer lexer(src_, i + 6, line_);
      std::vector<Token> none;
      absl::Status s = lexer.Run("%}", &none, &modifier);
      if (!s.ok()) return s;
      pos_ = lexer.pos();
      StripAfter('%', modifier);
      return absl::OkStatus();
    }
  }

  void AddText(std::string text) {
    if (text.empty()) return;
    segments_.push_back({Segment::Kind::kText, std::move(text), {}, line_});
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Segment> segments_;
};

}  // namespace

absl::StatusOr<std::vector<Segment>> Lex(std::string_view source) {
  return Splitter(NormalizeNewlines(source)).Run();
}

}  // namespace attn::jinja
