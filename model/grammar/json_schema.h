// JSON Schema (draft 2020-12 and draft-07) as GBNF: the grammar of the
// JSON texts a schema accepts, written compactly or with whitespace.
//
// Enforced: type (one or a list), properties (in definition order) with
// required and additionalProperties, items, prefixItems (draft-07's array
// `items` and additionalItems), minItems/maxItems, enum/const, anyOf,
// oneOf whose branches cannot overlap, allOf of one schema, $ref into
// $defs/definitions or the root (recursion included), string minLength/
// maxLength, pattern and the formats date-time, date, time, email, uuid,
// uri, ipv4 and ipv6, integer minimum/maximum/exclusive* exactly, number
// bounds that are integers, multipleOf 1 on integers, minProperties and
// maxProperties that the properties already satisfy. Annotations (title,
// description, examples, default, $comment, ...) are accepted.
//
// Anything else is refused with kInvalidArgument whose field
// (util/field_error.h) is the keyword's path in the schema, such as
// "properties.age.multipleOf": never silently ignored, so that every text
// the grammar accepts validates.
//
// Where the schema allows more than the grammar writes, the grammar writes
// a valid subset: objects get no properties beyond those declared (unless
// additionalProperties is given and properties is not; {"type": "object"}
// alone is any object), and property order is the declared one.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace attn::grammar {

struct JsonSchemaOptions {
  // Whitespace between tokens: one space, or a line break and at most
  // this much indentation (so a model cannot fill its output with blanks);
  // 0: compact JSON only.
  int max_whitespace = 20;
  int max_depth = 64;  // nesting of schemas inside schemas
};

// The GBNF grammar (with a `root` rule) of `schema`'s valid instances.
absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema,
                                             const JsonSchemaOptions& options = {});

// The GBNF grammar of any JSON object (response_format json_object).
std::string JsonObjectGbnf(const JsonSchemaOptions& options = {});

}  // namespace attn::grammar
