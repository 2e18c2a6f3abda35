// Regular expressions (the ECMA-262 subset JSON Schema's `pattern` and the
// `attn_structured.regex` extension use) as GBNF.
//
// Supported: literals and escapes (\d \w \s \D \W \S \n \t \r \f \v \xHH
// \uHHHH, escaped punctuation), classes with ranges and negation, `.`
// (anything but a line break), groups ( ) (?: ) and named groups (?<n> ),
// alternation, the quantifiers * + ? {m} {m,} {m,n} (lazy forms match the
// same strings), ^ at the start and $ at the end. Back-references,
// look-arounds and anchors elsewhere are refused: a constraint is never
// silently weakened.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/grammar/grammar_builder.h"

namespace attn::grammar {

struct RegexOptions {
  // The match is the whole text (a `regex` constraint), or a substring
  // unless ^ and $ anchor it (JSON Schema's `pattern`).
  bool search = false;
  // The text is the inside of a JSON string: characters that JSON escapes
  // (" \ and control characters) are written escaped.
  bool json_string = false;
  int max_nesting = 32;
};

// A GBNF expression (no rule definitions) for the strings the pattern
// matches. kInvalidArgument naming the offset and what is unsupported.
absl::StatusOr<std::string> RegexToGbnf(absl::string_view pattern, const RegexOptions& options);

// A GBNF expression for one character of `chars`; inside a JSON string,
// the characters JSON escapes are written escaped (and control characters
// other than \n \t \r \b \f left out). Empty when nothing remains.
std::string CharClassGbnf(const CodeRanges& chars, bool json_string);

}  // namespace attn::grammar
