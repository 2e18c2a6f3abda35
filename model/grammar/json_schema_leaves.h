// GBNF for JSON Schema's leaves: numbers in ranges, string formats
// (internal to json_schema.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

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

}  // namespace attn::grammar
