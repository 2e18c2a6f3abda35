// JSON Schema (draft 2020-12 and draft-07) as GBNF: the grammar of the
// JSON texts a schema accepts, written compactly or with whitespace.
//
// Enforced: type (one or a list), properties (in definition order) with
// required, additionalProperties and patternProperties, items, prefixItems
// (draft-07's array `items` and additionalItems), minItems/maxItems,
// enum/const, anyOf, oneOf whose branches cannot overlap, allOf and
// combinator siblings that merge, not (json_schema_not.cc), $ref into
// $defs/definitions or the root (recursion included), string minLength/
// maxLength, pattern and the formats date-time, date, time, email, uuid,
// uri, ipv4, ipv6 and hostname, integer minimum/maximum/exclusive*
// exactly, number bounds that are integers, multipleOf 1 on integers,
// minProperties and maxProperties. Annotations (title, description,
// examples, default, $comment, ...) are accepted.
//
// Anything else is refused with kInvalidArgument whose field
// (util/field_error.h) is the keyword's path in the schema, such as
// "properties.age.multipleOf": never silently ignored, so that every text
// the grammar accepts validates.
//
// Where the schema allows more than the grammar writes, the grammar writes
// a valid subset: declared properties come first, in the declared order,
// then undeclared ones; `not` of a union takes one member; bounds past
// 1,000 stop at 1,000 (docs/structured-output.md lists each).
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
