// GBNF for JSON Schema's leaves: numbers in ranges, string formats
// (internal to json_schema.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace attn::grammar {

// The base rules every schema grammar may use: value, object, array,
// string, char, number, integer, boolean, null; `ws` is the caller's.
std::string JsonBaseRules();

// Integers in [lo, hi] (either may be open), written without leading
// zeros. Bounds within +-2^62.
std::string IntegerRangeGbnf(std::optional<int64_t> lo, std::optional<int64_t> hi);

// Numbers in [lo, hi] for integer bounds (either may be open), written
// without exponent.
std::string NumberRangeGbnf(std::optional<int64_t> lo, std::optional<int64_t> hi);

// The GBNF of a JSON string (quotes included) in `format`. Empty for a
// name that is no standard format (JSON Schema's, OpenAPI's, ajv-formats'):
// an annotation. nullopt for a standard one this does not enforce.
std::optional<std::string> FormatGbnf(absl::string_view format);

// The GBNF of a JSON string (quotes included) whose value is none of
// `excluded` (an object's undeclared keys, `not` of string constants);
// `define` adds a rule with the given body and returns its name. nullopt
// when an excluded string has a character other than printable ASCII
// (" and \ excepted), which it does not spell out. Where the string is
// still a prefix of an excluded one, \/ and \u escapes (which could spell
// its next character) are left out: a valid subset.
std::optional<std::string> StringExceptGbnf(
    const std::vector<std::string>& excluded,
    const std::function<std::string(const std::string&)>& define);

}  // namespace attn::grammar
