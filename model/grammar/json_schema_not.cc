// `not`: the rest of a schema narrowed so that nothing it accepts matches
// the negated schema. Where the complement is a union (not of an allOf, of
// several keywords, of a required list), one member of the union is taken:
// a valid subset, never an instance the schema refuses.
#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/grammar/json_schema_compiler.h"
#include "util/field_error.h"

namespace attn::grammar::internal {
namespace {

const std::vector<std::string>& AllTypes() {
  static const auto* types =
      new std::vector<std::string>{"null", "boolean", "object", "array", "number", "string"};
  return *types;
}

// The JSON type names of a value, as `type` lists them ("number" for any
// number: removing a number's type removes integers and the rest).
std::string TypeName(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  if (v.is_object()) return "object";
  return "number";
}

// Adds `schema` to what `rest` asserts.
void Conjoin(Json* rest, const Json& schema) {
  if (!rest->contains("allOf") || !(*rest)["allOf"].is_array()) {
    (*rest)["allOf"] = Json::array();
  }
  (*rest)["allOf"].push_back(schema);
}

// The keywords a negation may pick, in order of preference: those that
// narrow the rest least come first.
const std::vector<std::string>& Negatable() {
  static const auto* keys = new std::vector<std::string>{"not",   "required", "enum", "const",
                                                         "anyOf", "allOf",    "$ref", "type"};
  return *keys;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> SchemaCompiler::AllowedTypes(const Json& rest,
                                                                      const std::string& path) {
  auto types = Types(rest, path);
  if (!types.ok()) return types.status();
  if (types->empty()) return AllTypes();
  return types;
}

absl::StatusOr<Json> SchemaCompiler::WithTypes(Json rest, const std::set<std::string>& removed,
                                               const std::string& path) {
  auto types = AllowedTypes(rest, path);
  if (!types.ok()) return types.status();
  Json kept = Json::array();
  for (const auto& t : *types) {
    const bool number = t == "number" || t == "integer";
    if (!removed.count(t) && !(number && removed.count("number"))) kept.push_back(t);
  }
  if (kept.empty()) return InvalidField(Join(path, "not"), "no value of an allowed type is left");
  rest["type"] = std::move(kept);
  return rest;
}

absl::StatusOr<Json> SchemaCompiler::ApplyNot(Json rest, const Json& n, const std::string& path,
                                              int depth) {
  const std::string at = Join(path, "not");
  if (depth > options_.max_depth)
    return InvalidField(at, "nested deeper than ", options_.max_depth);
  if (n.is_boolean()) {
    if (!n.get<bool>()) return rest;
    return InvalidField(at, "the schema matches nothing");
  }
  if (!n.is_object()) return InvalidField(at, "must be a schema (an object or a boolean)");
  std::vector<std::string> keys;
  for (const auto& item : n.items()) {
    if (IsConstraint(item.key())) keys.push_back(item.key());
  }
  if (keys.empty()) return InvalidField(at, "the schema matches nothing");
  if (keys.size() > 1) {
    // not (A and B) = not A or not B: the first that leaves something.
    for (const auto& key : Negatable()) {
      if (!n.contains(key)) continue;
      auto narrowed = ApplyNot(rest, Json{{key, n[key]}}, path, depth + 1);
      if (narrowed.ok()) return narrowed;
    }
    return InvalidField(at, "no keyword of it can be negated (supported: ",
                        "not, required, enum, const, anyOf, allOf, $ref, type)");
  }
  const std::string& key = keys[0];
  const Json& v = n[key];
  if (key == "not") {
    Conjoin(&rest, v);
    return rest;
  }
  if (key == "$ref") {
    auto target = Resolve(v, Join(at, "$ref"));
    if (!target.ok()) return target.status();
    return ApplyNot(std::move(rest), **target, path, depth + 1);
  }
  if (key == "anyOf" || key == "allOf") {
    if (!v.is_array() || v.empty()) return InvalidField(Join(at, key), "must be a non-empty array");
    for (const auto& branch : v) {
      auto narrowed = ApplyNot(rest, branch, path, depth + 1);
      if (key == "allOf" && narrowed.ok()) return narrowed;  // not (A and B): not A
      if (key == "anyOf") {                                  // not (A or B): not A and not B
        if (!narrowed.ok()) return narrowed.status();
        rest = *std::move(narrowed);
      }
    }
    if (key == "anyOf") return rest;
    return InvalidField(Join(at, key), "no branch can be negated");
  }
  if (key == "type") {
    std::set<std::string> removed;
    for (const auto& t : v.is_array() ? v : Json::array({v})) {
      if (!t.is_string()) return InvalidField(Join(at, key), "must be a type name or a list");
      // not integer leaves fractions, which no grammar here separates.
      removed.insert(t == "integer" ? "number" : t.get<std::string>());
    }
    return WithTypes(std::move(rest), removed, path);
  }
  if (key == "required") return NotRequired(std::move(rest), v, path);
  if (key == "enum" || key == "const") {
    if (key == "enum" && !v.is_array()) return InvalidField(Join(at, key), "must be an array");
    return NotValues(std::move(rest), key == "enum" ? v : Json::array({v}), path);
  }
  return InvalidField(Join(at, key), "cannot be negated (supported: not, required, enum, const, ",
                      "anyOf, allOf, $ref, type)");
}

absl::StatusOr<Json> SchemaCompiler::NotRequired(Json rest, const Json& names,
                                                 const std::string& path) {
  const std::string at = Join(Join(path, "not"), "required");
  if (!names.is_array() || names.empty()) return InvalidField(at, "must be a non-empty array");
  // Required holds for every non-object: its negation is an object that
  // lacks one of the names (the first the rest does not require).
  std::set<std::string> needed;
  if (rest.contains("required") && rest["required"].is_array()) {
    for (const auto& r : rest["required"]) {
      if (r.is_string()) needed.insert(r.get<std::string>());
    }
  }
  for (const auto& name : names) {
    if (!name.is_string()) return InvalidField(at, "must be an array of names");
    if (needed.count(name.get<std::string>())) continue;
    auto types = AllowedTypes(rest, path);
    if (!types.ok()) return types.status();
    if (std::find(types->begin(), types->end(), "object") == types->end()) {
      return InvalidField(at, "only objects can lack a property, and no object is allowed");
    }
    rest["type"] = "object";
    if (!rest.contains("properties") || !rest["properties"].is_object()) {
      rest["properties"] = Json::object();
    }
    rest["properties"][name.get<std::string>()] = false;
    return rest;
  }
  return InvalidField(at, "every name is required by the schema: nothing matches");
}

absl::StatusOr<Json> SchemaCompiler::NotValues(Json rest, const Json& values,
                                               const std::string& path) {
  const std::string at = Join(path, "not");
  // Constants of the rest: the excluded ones removed, exactly.
  for (const char* key : {"const", "enum"}) {
    if (!rest.contains(key)) continue;
    Json kept = Json::array();
    for (const auto& c : std::string(key) == "const" ? Json::array({rest[key]}) : rest[key]) {
      if (std::find(values.begin(), values.end(), c) == values.end()) kept.push_back(c);
    }
    if (kept.empty()) return InvalidField(at, "excludes every value the schema allows");
    rest.erase(key);
    rest["enum"] = std::move(kept);
    return rest;
  }
  // Otherwise strings are excluded one by one (x-attn-not-strings, which
  // String reads), and a type with any other excluded value goes whole.
  std::set<std::string> removed;
  Json strings = rest.value(kNotStrings, Json::array());
  for (const auto& value : values) {
    if (value.is_string()) {
      strings.push_back(value);
    } else {
      removed.insert(TypeName(value));
    }
  }
  if (!strings.empty()) rest[kNotStrings] = std::move(strings);
  // An explicit type list, so that a schema naming none is not compiled
  // as any value (which would drop the excluded strings).
  return WithTypes(std::move(rest), removed, path);
}

}  // namespace attn::grammar::internal
