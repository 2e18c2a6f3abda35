#include "server/core/structured.h"

#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "util/field_error.h"

namespace attn::serving {
namespace {

using Json = nlohmann::ordered_json;

absl::Status OnlyKeys(const Json& object, const std::string& field,
                      const std::set<std::string>& known) {
  for (const auto& item : object.items()) {
    if (!known.count(item.key())) {
      return InvalidField(absl::StrCat(field, ".", item.key()), "is not a known field");
    }
  }
  return absl::OkStatus();
}

// {"name", "schema", "strict", "description"} at `field`.
absl::StatusOr<RequestConstraint> JsonSchemaFormat(const Json& spec, const std::string& field,
                                                   std::set<std::string> known) {
  known.insert({"name", "schema", "strict", "description"});
  if (absl::Status s = OnlyKeys(spec, field, known); !s.ok()) return s;
  for (const char* key : {"name", "description"}) {
    if (spec.contains(key) && !spec[key].is_string()) {
      return InvalidField(absl::StrCat(field, ".", key), "must be a string");
    }
  }
  if (spec.contains("strict") && !spec["strict"].is_boolean() && !spec["strict"].is_null()) {
    return InvalidField(absl::StrCat(field, ".strict"), "must be a boolean");
  }
  const std::string schema_field = absl::StrCat(field, ".schema");
  if (!spec.contains("schema")) return InvalidField(schema_field, "missing");
  if (!spec["schema"].is_object() && !spec["schema"].is_boolean()) {
    return InvalidField(schema_field, "must be a JSON Schema object");
  }
  return RequestConstraint{grammar::OutputConstraint::JsonSchema(spec["schema"]), schema_field};
}

}  // namespace

absl::StatusOr<RequestConstraint> ParseResponseFormat(const Json& format, const std::string& field,
                                                      bool flat) {
  if (!format.is_object() || !format.contains("type") || !format["type"].is_string()) {
    return InvalidField(field, "must be an object with a \"type\"");
  }
  const std::string type = format["type"];
  if (type == "text" || type == "json_object") {
    if (absl::Status s = OnlyKeys(format, field, {"type"}); !s.ok()) return s;
    if (type == "text") return RequestConstraint{};
    return RequestConstraint{grammar::OutputConstraint::JsonObject(), field};
  }
  if (type != "json_schema") {
    return InvalidField(absl::StrCat(field, ".type"),
                        "must be \"text\", \"json_object\" or \"json_schema\"");
  }
  if (flat) return JsonSchemaFormat(format, field, {"type"});
  if (absl::Status s = OnlyKeys(format, field, {"type", "json_schema"}); !s.ok()) return s;
  const std::string spec_field = absl::StrCat(field, ".json_schema");
  if (!format.contains("json_schema") || !format["json_schema"].is_object()) {
    return InvalidField(spec_field, "must be an object with the \"schema\"");
  }
  return JsonSchemaFormat(format["json_schema"], spec_field, {});
}

absl::StatusOr<RequestConstraint> ParseStructured(const Json& value, const std::string& field) {
  if (!value.is_object() || value.size() != 1) {
    return InvalidField(field, "must be an object with one of \"regex\", \"choice\", \"grammar\"");
  }
  const auto first = value.begin();
  const std::string key = first.key();
  const Json& content = first.value();
  const std::string at = absl::StrCat(field, ".", key);
  if (key == "regex" || key == "grammar") {
    if (!content.is_string() || content.get<std::string>().empty()) {
      return InvalidField(at, "must be a non-empty string");
    }
    return RequestConstraint{key == "regex" ? grammar::OutputConstraint::Regex(content)
                                            : grammar::OutputConstraint::Gbnf(content),
                             at};
  }
  if (key == "choice") {
    std::vector<std::string> choices;
    if (content.is_array()) {
      for (const auto& c : content) {
        if (!c.is_string() || c.get<std::string>().empty()) break;
        choices.push_back(c);
      }
    }
    if (choices.empty() || choices.size() != content.size()) {
      return InvalidField(at, "must be a non-empty array of non-empty strings");
    }
    return RequestConstraint{grammar::OutputConstraint::Choice(std::move(choices)), at};
  }
  return InvalidField(at, "is not a known field (\"regex\", \"choice\" or \"grammar\")");
}

absl::StatusOr<RequestConstraint> ToolCallConstraint(ToolCallFormat format,
                                                     const std::string& tools_json,
                                                     const std::string& name, bool parallel) {
  if (format == ToolCallFormat::kLfm2) {
    return InvalidField("tool_choice",
                        "\"required\" and named functions are not supported for this model's "
                        "Python-style (lfm2) tool calls; use \"auto\"");
  }
  const char* arguments = format == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
  const Json tools = Json::parse(tools_json);
  Json calls = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& function = tools[i]["function"];
    if (!name.empty() && function["name"] != name) continue;
    Json parameters = function.value("parameters", Json{{"type", "object"}});
    // Each schema's errors name its own place in `tools`.
    RequestConstraint check{grammar::OutputConstraint::JsonSchema(parameters),
                            absl::StrCat("tools[", i, "].function.parameters")};
    if (auto compiled = CompileConstraint(check); !compiled.ok()) return compiled.status();
    calls.push_back(
        {{"type", "object"},
         {"properties", {{"name", {{"const", function["name"]}}}, {arguments, parameters}}},
         {"required", {"name", arguments}},
         {"additionalProperties", false}});
  }
  if (calls.empty()) return InvalidField("tool_choice", "names no function of `tools`");
  auto gbnf = grammar::ConstraintGbnf(
      grammar::OutputConstraint::JsonSchema(calls.size() == 1 ? calls[0] : Json{{"anyOf", calls}}));
  if (!gbnf.ok()) return InvalidField("tools", gbnf.status().message());
  // The schema's root becomes one call inside the format's markers.
  std::string text = "call" + gbnf->substr(gbnf->find(" ::= "));
  std::string root;
  switch (format) {
    case ToolCallFormat::kLlama3Json:
      root = parallel ? R"(call ( "; " call )*)" : "call";
      break;
    case ToolCallFormat::kMistral:
    case ToolCallFormat::kGranite: {
      const std::string open =
          format == ToolCallFormat::kMistral ? "[TOOL_CALLS][" : "<|tool_call|>[";
      root = absl::StrCat(grammar::GbnfLiteral(open),
                          parallel ? R"( call ( ", " call )* "]")" : R"( call "]")");
      break;
    }
    default:  // hermes, and the built-in chat formats, which write calls as Hermes does
      root = parallel ? R"(hermes ( "\n" hermes )*)" : "hermes";
      text += "hermes ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\n";
  }
  RequestConstraint out{
      grammar::OutputConstraint::Gbnf(absl::StrCat("root ::= ", root, "\n", text)), "tool_choice"};
  return out;
}

absl::StatusOr<std::shared_ptr<const grammar::Grammar>> CompileConstraint(
    const RequestConstraint& request) {
  auto compiled = grammar::GrammarCache::Shared().Get(request.constraint);
  if (compiled.ok()) return compiled;
  const absl::Status& status = compiled.status();
  // A schema's errors carry the keyword's path below the schema ("" for
  // the schema itself, ".properties.age.minimum").
  if (status.GetPayload(kFieldPayload).has_value()) {
    absl::Status out(status.code(), absl::StrCat(request.field, status.message()));
    out.SetPayload(kFieldPayload, absl::Cord(absl::StrCat(request.field, FieldOf(status))));
    return out;
  }
  return InvalidField(request.field, status.message());
}

absl::StatusOr<std::shared_ptr<const grammar::Grammar>> OutputGrammar(
    const RequestConstraint& constraint, const ToolForcing& tools) {
  if (!tools.forced) {
    if (!constraint.active()) return std::shared_ptr<const grammar::Grammar>();
    return CompileConstraint(constraint);
  }
  if (constraint.active()) {
    return InvalidField("tool_choice", "a forced tool call cannot also follow ",
                        constraint.field.substr(0, constraint.field.find('.')));
  }
  auto calls = ToolCallConstraint(tools.format, tools.tools_json, tools.function, tools.parallel);
  if (!calls.ok()) return calls.status();
  return CompileConstraint(*calls);
}

}  // namespace attn::serving
