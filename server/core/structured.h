// Structured output for every protocol: a constraint as a request states
// it (OpenAI's response_format, the Responses API's text.format, the
// attn_structured extension, gRPC's GenerateRequest.structured) read into
// a grammar::OutputConstraint, and compiled through the process's grammar
// cache. Errors are kInvalidArgument naming the field the client wrote,
// down to a JSON Schema keyword's path.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/grammar/constraint.h"
#include "model/grammar/grammar.h"
#include "model/text/tool_calls.h"
#include "nlohmann/json.hpp"

namespace attn::serving {

// A constraint and the field its content came from: the schema's (so a
// keyword's error is "response_format.json_schema.schema.properties.x"),
// the regex's, the grammar's.
struct RequestConstraint {
  grammar::OutputConstraint constraint;
  std::string field;
  bool active() const { return constraint.kind != grammar::OutputConstraint::Kind::kNone; }
};

// OpenAI's response_format object, at `field`: {"type": "text"} (no
// constraint), {"type": "json_object"}, {"type": "json_schema",
// "json_schema": {"name", "schema", "strict", "description"}}. With
// `flat` (the Responses API's text.format) name, schema and strict sit
// beside "type".
absl::StatusOr<RequestConstraint> ParseResponseFormat(const nlohmann::ordered_json& format,
                                                      const std::string& field, bool flat = false);

// The attn_structured extension at `field`: exactly one of {"regex":
// pattern}, {"choice": [strings]}, {"grammar": GBNF text}.
absl::StatusOr<RequestConstraint> ParseStructured(const nlohmann::ordered_json& value,
                                                  const std::string& field);

// A reply that must be a tool call (tool_choice "required", or a named
// function when `name` is set): the grammar of one call, or with
// `parallel` one or more, of the tools in `tools_json` (OpenAI function
// tools, Chat Completions' form) in the model's tool-call `format`, the
// arguments following each function's `parameters` schema. Errors name
// "tool_choice" (a format whose calls are not JSON: lfm2) or the
// parameters' keyword ("tools[1].function.parameters.properties.x").
absl::StatusOr<RequestConstraint> ToolCallConstraint(ToolCallFormat format,
                                                     const std::string& tools_json,
                                                     const std::string& name, bool parallel);

// The compiled grammar (cached by constraint). kInvalidArgument naming
// request.field (and a schema keyword's path below it).
absl::StatusOr<std::shared_ptr<const grammar::Grammar>> CompileConstraint(
    const RequestConstraint& request);

// The grammar of a request's output, null for free text: `constraint`'s,
// or, when tool_choice forces a call (`forced_tool`: "" for any), the
// tool calls' (ToolCallConstraint). kInvalidArgument naming tool_choice
// when both are asked for.
struct ToolForcing {
  bool forced = false;
  std::string function;  // "" for any of the tools
  std::string tools_json;
  bool parallel = true;
  ToolCallFormat format = ToolCallFormat::kHermes;
};
absl::StatusOr<std::shared_ptr<const grammar::Grammar>> OutputGrammar(
    const RequestConstraint& constraint, const ToolForcing& tools);

}  // namespace attn::serving
