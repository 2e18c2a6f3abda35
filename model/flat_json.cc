#include "model/flat_json.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace attn {
namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::Status Error(std::string_view expected) const {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON at offset ", pos_, ": expected ", std::string(expected)));
  }

  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  bool AtEnd() {
    SkipSpace();
    return pos_ == text_.size();
  }

  absl::StatusOr<std::string> String() {
    if (!Consume('"')) return Error("'\"'");
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      char c = text_[pos_++];
      if (static_cast<unsigned char>(c) < 0x20) return Error("no control character in a string");
      if (c == '\\') {
        if (pos_ >= text_.size()) return Error("an escape");
        const char e = text_[pos_++];
        switch (e) {
          case '"':
            c = '"';
            break;
          case '\\':
            c = '\\';
            break;
          case '/':
            c = '/';
            break;
          case 'n':
            c = '\n';
            break;
          case 't':
            c = '\t';
            break;
          case 'r':
            c = '\r';
            break;
          default:
            return Error("one of the escapes \\\" \\\\ \\/ \\n \\t \\r");
        }
      }
      out.push_back(c);
    }
    if (!Consume('"')) return Error("closing '\"'");
    return out;
  }

  // A number or true/false, returned as written.
  absl::StatusOr<std::string> Literal(bool* is_bool) {
    SkipSpace();
    for (const char* word : {"true", "false"}) {
      const std::string_view w(word);
      if (text_.substr(pos_, w.size()) == w) {
        pos_ += w.size();
        *is_bool = true;
        return std::string(w);
      }
    }
    *is_bool = false;
    const size_t begin = pos_;
    while (pos_ < text_.size() &&
           (std::isdigit(static_cast<unsigned char>(text_[pos_])) ||
            std::string_view("+-.eE").find(text_[pos_]) != std::string_view::npos)) {
      ++pos_;
    }
    std::string number(text_.substr(begin, pos_ - begin));
    char* end = nullptr;
    std::strtod(number.c_str(), &end);
    if (number.empty() || end != number.c_str() + number.size()) {
      pos_ = begin;
      return Error("a string, a number, true or false");
    }
    return number;
  }

  char Peek() {
    SkipSpace();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        out.push_back(c);
    }
  }
  return out + "\"";
}

}  // namespace

absl::StatusOr<FlatJson> FlatJson::Parse(std::string_view text) {
  Parser p(text);
  FlatJson json;
  if (!p.Consume('{')) return p.Error("'{'");
  if (!p.Consume('}')) {
    do {
      auto key = p.String();
      if (!key.ok()) return key.status();
      if (!p.Consume(':')) return p.Error("':'");
      Value value;
      if (p.Peek() == '"') {
        auto s = p.String();
        if (!s.ok()) return s.status();
        value = {Type::kString, *s};
      } else {
        bool is_bool = false;
        auto literal = p.Literal(&is_bool);
        if (!literal.ok()) return literal.status();
        value = {is_bool ? Type::kBool : Type::kNumber, *literal};
      }
      if (!json.values_.emplace(*key, value).second) {
        return absl::InvalidArgumentError(absl::StrCat("duplicate JSON key \"", *key, "\""));
      }
    } while (p.Consume(','));
    if (!p.Consume('}')) return p.Error("',' or '}'");
  }
  if (!p.AtEnd()) return p.Error("the end after the object");
  return json;
}

void FlatJson::SetString(const std::string& key, const std::string& value) {
  values_[key] = {Type::kString, value};
}
void FlatJson::SetInt(const std::string& key, int64_t value) {
  values_[key] = {Type::kNumber, std::to_string(value)};
}
void FlatJson::SetDouble(const std::string& key, double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  values_[key] = {Type::kNumber, buffer};
}
void FlatJson::SetBool(const std::string& key, bool value) {
  values_[key] = {Type::kBool, value ? "true" : "false"};
}

absl::StatusOr<const FlatJson::Value*> FlatJson::Find(const std::string& key, Type type) const {
  auto it = values_.find(key);
  if (it == values_.end()) return absl::InvalidArgumentError(absl::StrCat("missing \"", key, "\""));
  if (it->second.type != type) {
    static const char* kNames[] = {"a string", "a number", "a boolean"};
    return absl::InvalidArgumentError(
        absl::StrCat("\"", key, "\" must be ", kNames[static_cast<int>(type)]));
  }
  return &it->second;
}

absl::StatusOr<std::string> FlatJson::GetString(const std::string& key) const {
  auto v = Find(key, Type::kString);
  if (!v.ok()) return v.status();
  return (*v)->text;
}

absl::StatusOr<int64_t> FlatJson::GetInt(const std::string& key) const {
  auto v = Find(key, Type::kNumber);
  if (!v.ok()) return v.status();
  const std::string& text = (*v)->text;
  char* end = nullptr;
  const long long parsed = std::strtoll(text.c_str(), &end, 10);
  if (end != text.c_str() + text.size()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" must be an integer"));
  }
  return static_cast<int64_t>(parsed);
}

absl::StatusOr<double> FlatJson::GetDouble(const std::string& key) const {
  auto v = Find(key, Type::kNumber);
  if (!v.ok()) return v.status();
  return std::strtod((*v)->text.c_str(), nullptr);
}

absl::StatusOr<bool> FlatJson::GetBool(const std::string& key) const {
  auto v = Find(key, Type::kBool);
  if (!v.ok()) return v.status();
  return (*v)->text == "true";
}

std::vector<std::string> FlatJson::Keys() const {
  std::vector<std::string> keys;
  for (const auto& entry : values_) keys.push_back(entry.first);
  return keys;
}

std::string FlatJson::Serialize() const {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, value] : values_) {
    out += first ? "\n  " : ",\n  ";
    first = false;
    out += Quote(key) + ": " + (value.type == Type::kString ? Quote(value.text) : value.text);
  }
  return out + (values_.empty() ? "}" : "\n}");
}

}  // namespace attn
