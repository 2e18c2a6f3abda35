// Splits a Jinja template into text and tags, applying Jinja2's whitespace
// rules as Hugging Face configures them (trim_blocks and lstrip_blocks on,
// keep_trailing_newline off, "-" and "+" modifiers), and tokenizes what is
// inside each tag. Newlines (\r\n, \r) become \n, as Jinja2 does.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace attn::jinja {

struct Token {
  enum class Kind { kName, kString, kInt, kFloat, kOperator };
  Kind kind;
  std::string text;  // a string literal's value with its escapes resolved
  int line;
};

struct Segment {
  enum class Kind { kText, kOutput, kStatement };  // text, {{ ... }}, {% ... %}
  Kind kind;
  std::string text;           // kText only
  std::vector<Token> tokens;  // kOutput and kStatement
  int line;                   // where the segment starts, from 1
};

// An InvalidArgument error "line N: message": how the lexer and the parser
// name where a template is wrong.
absl::Status LineError(int line, const std::string& message);

// Fails on an unterminated tag, comment or string, or a character no token
// starts with, naming the line.
absl::StatusOr<std::vector<Segment>> Lex(std::string_view source);

}  // namespace attn::jinja
