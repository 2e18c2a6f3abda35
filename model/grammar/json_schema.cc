#include "model/grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/grammar/grammar.h"
#include "model/grammar/json_schema_compiler.h"
#include "model/grammar/json_schema_leaves.h"
#include "model/grammar/json_schema_merge.h"
#include "model/grammar/regex.h"
#include "util/field_error.h"

namespace attn::grammar {
namespace internal {
namespace {

std::string WhitespaceRule(const JsonSchemaOptions& options) {
  if (options.max_whitespace <= 0) return "ws ::= \"\"\n";
  return absl::StrCat("ws ::= ( \" \" | \"\\n\" [ \\t]{0,", options.max_whitespace, "} )?\n");
}

std::string Literal(const Json& value) { return GbnfLiteral(value.dump()); }

// The JSON type names a value has ("integer" values are numbers too).
bool HasType(const Json& value, absl::string_view type) {
  if (type == "null") return value.is_null();
  if (type == "boolean") return value.is_boolean();
  if (type == "string") return value.is_string();
  if (type == "array") return value.is_array();
  if (type == "object") return value.is_object();
  if (type == "integer") {
    return value.is_number_integer() ||
           (value.is_number_float() && std::floor(value.get<double>()) == value.get<double>());
  }
  return type == "number" && value.is_number();
}

bool IsUnsupported(const std::string& key) {
  const auto& keys = UnsupportedKeywords();
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

}  // namespace

// Every keyword that is neither these nor a constraint is an annotation (as
// the specification treats unknown keywords): accepted, without effect.
const std::vector<std::string>& UnsupportedKeywords() {
  static const auto* keys = new std::vector<std::string>{"if",
                                                         "then",
                                                         "else",
                                                         "dependentRequired",
                                                         "dependentSchemas",
                                                         "dependencies",
                                                         "propertyNames",
                                                         "contains",
                                                         "minContains",
                                                         "maxContains",
                                                         "unevaluatedItems",
                                                         "$dynamicRef",
                                                         "$recursiveRef",
                                                         "contentSchema"};
  return *keys;
}

bool IsConstraint(const std::string& key) {
  static const auto* keys = new std::set<std::string>{"type",
                                                      "properties",
                                                      "required",
                                                      "additionalProperties",
                                                      "patternProperties",
                                                      "items",
                                                      "prefixItems",
                                                      "additionalItems",
                                                      "minItems",
                                                      "maxItems",
                                                      "enum",
                                                      "const",
                                                      "anyOf",
                                                      "oneOf",
                                                      "allOf",
                                                      "not",
                                                      "$ref",
                                                      "minLength",
                                                      "maxLength",
                                                      "pattern",
                                                      "format",
                                                      "minimum",
                                                      "maximum",
                                                      "exclusiveMinimum",
                                                      "exclusiveMaximum",
                                                      "multipleOf",
                                                      "minProperties",
                                                      "maxProperties",
                                                      "unevaluatedProperties",
                                                      "uniqueItems"};
  return keys->count(key) > 0;
}

absl::StatusOr<std::string> SchemaCompiler::Compile() {
  auto expr = Expr(root_, "", 0);
  if (!expr.ok()) return expr.status();
  return absl::StrCat("root ::= ", *expr, "\n", rules_, JsonBaseRules(), WhitespaceRule(options_));
}

std::string SchemaCompiler::Define(const std::string& body) {
  std::string name = absl::StrCat("s", ++count_);
  Define(name, body);
  return name;
}

void SchemaCompiler::Define(const std::string& name, const std::string& body) {
  absl::StrAppend(&rules_, name, " ::= ", body, "\n");
}

absl::StatusOr<std::string> SchemaCompiler::Expr(const Json& s, const std::string& path,
                                                 int depth) {
  if (s.is_boolean()) {
    if (s.get<bool>()) return std::string("value");
    return InvalidField(path, "the schema false matches nothing");
  }
  if (!s.is_object()) return InvalidField(path, "must be a schema (an object or a boolean)");
  if (depth > options_.max_depth) {
    return InvalidField(path, "schemas nested deeper than ", options_.max_depth);
  }
  std::vector<std::string> constraints;
  for (const auto& item : s.items()) {
    if (IsConstraint(item.key())) constraints.push_back(item.key());
    if (IsUnsupported(item.key())) {
      return InvalidField(Join(path, item.key()), "this keyword is not supported");
    }
  }
  if (s.contains("not")) return Negated(s, path, depth);
  for (const char* combinator : {"$ref", "anyOf", "oneOf", "allOf"}) {
    if (!s.contains(combinator)) continue;
    if (constraints.size() == 1 && std::string(combinator) != "allOf") {
      return Combinator(s, combinator, path, depth);
    }
    return Merged(s, path, depth);
  }
  if (s.contains("const") || s.contains("enum")) return Enum(s, path);
  return Typed(s, path, depth);
}

absl::StatusOr<std::string> SchemaCompiler::Negated(const Json& s, const std::string& path,
                                                    int depth) {
  Json rest = s;
  rest.erase("not");
  auto narrowed = ApplyNot(std::move(rest), s["not"], path, depth + 1);
  if (!narrowed.ok()) return narrowed.status();
  return Expr(*narrowed, path, depth + 1);
}

absl::StatusOr<std::string> SchemaCompiler::Merged(const Json& s, const std::string& path,
                                                   int depth) {
  std::vector<Json> parts{Json::object()};
  for (const auto& item : s.items()) {
    if (IsConstraint(item.key()) && item.key() != "$ref" && item.key() != "allOf" &&
        item.key() != "anyOf" && item.key() != "oneOf") {
      parts[0][item.key()] = item.value();
    }
  }
  std::vector<std::pair<std::string, const Json*>> members;
  if (s.contains("$ref")) members.emplace_back(Join(path, "$ref"), &s);
  if (s.contains("allOf")) {
    if (!s["allOf"].is_array()) return InvalidField(Join(path, "allOf"), "must be an array");
    for (size_t i = 0; i < s["allOf"].size(); ++i) {
      members.emplace_back(absl::StrCat(Join(path, "allOf"), "[", i, "]"), &s["allOf"][i]);
    }
  }
  for (const auto& [at, member] : members) {
    // A reference joins as what it names (one level deep).
    const Json* ref = member == &s                                      ? &s["$ref"]
                      : member->is_object() && member->contains("$ref") ? &(*member)["$ref"]
                                                                        : nullptr;
    if (ref == nullptr) {
      parts.push_back(*member);
      continue;
    }
    auto resolved = Resolve(*ref, member == &s ? at : Join(at, "$ref"));
    if (!resolved.ok()) return resolved.status();
    parts.push_back(**resolved);
    if (member != &s) {  // the reference's siblings join too
      Json rest = *member;
      rest.erase("$ref");
      parts.push_back(std::move(rest));
    }
  }
  std::string conflict;
  auto merged = MergeSchemas(parts, &conflict);
  if (!merged) {
    return InvalidField(Join(path, conflict), "cannot be combined with the other parts of ",
                        "its schema (allOf, $ref siblings)");
  }
  for (const char* branches : {"anyOf", "oneOf"}) {
    if (!s.contains(branches)) continue;
    const Json& list = s[branches];
    if (!list.is_array()) return InvalidField(Join(path, branches), "must be an array");
    Json expanded = Json::array();
    for (const auto& branch : list) {
      std::vector<Json> parts{*merged, branch};
      if (branch.is_object() && branch.contains("$ref")) {  // what it names, and its siblings
        auto resolved = Resolve(branch["$ref"], Join(path, branches));
        if (!resolved.ok()) return resolved.status();
        parts.back().erase("$ref");
        parts.push_back(**resolved);
      }
      auto both = MergeSchemas(parts, &conflict);
      if (!both) {
        return InvalidField(Join(path, conflict), "cannot be combined with each branch of ",
                            branches);
      }
      expanded.push_back(*both);
    }
    return Combinator(Json{{branches, expanded}}, branches, path, depth);
  }
  return Expr(*merged, path, depth + 1);
}

absl::StatusOr<const Json*> SchemaCompiler::Resolve(const Json& ref, const std::string& at) {
  if (!ref.is_string()) return InvalidField(at, "must be a string");
  const std::string target = ref.get<std::string>();
  if (target.empty() || target[0] != '#') {
    return InvalidField(at, "only references inside the schema (#...) are supported");
  }
  try {
    return &root_.at(Json::json_pointer(target.substr(1)));
  } catch (const std::exception&) {
    return InvalidField(at, "'", target, "' does not name a part of the schema");
  }
}

absl::StatusOr<std::string> SchemaCompiler::Enum(const Json& s, const std::string& path) {
  const std::string key = s.contains("const") ? "const" : "enum";
  const Json values = key == "const" ? Json::array({s["const"]}) : s["enum"];
  if (!values.is_array() || values.empty()) {
    return InvalidField(Join(path, "enum"), "must be a non-empty array");
  }
  std::vector<std::string> types;
  if (s.contains("type")) {
    if (s["type"].is_string()) types.push_back(s["type"]);
    if (s["type"].is_array()) {
      for (const auto& t : s["type"]) types.push_back(t.is_string() ? t.get<std::string>() : "");
    }
  }
  const Json none = Json::array();
  const Json& excluded = s.contains(kNotStrings) ? s[kNotStrings] : none;
  std::vector<std::string> alternatives;
  for (const auto& v : values) {
    bool typed = types.empty();
    for (const auto& t : types) typed = typed || HasType(v, t);
    const bool listed = key == "enum" || !s.contains("enum") ||
                        std::find(s["enum"].begin(), s["enum"].end(), v) != s["enum"].end();
    const bool kept = std::find(excluded.begin(), excluded.end(), v) == excluded.end();
    if (typed && listed && kept) alternatives.push_back(Literal(v));
  }
  if (alternatives.empty()) {
    return InvalidField(Join(path, key), "no value has the schema's type (or passes its not)");
  }
  return absl::StrCat("(", absl::StrJoin(alternatives, " | "), ")");
}

absl::StatusOr<std::string> SchemaCompiler::Combinator(const Json& s, const std::string& kind,
                                                       const std::string& path, int depth) {
  const std::string at = Join(path, kind);
  if (kind == "$ref") return Ref(s["$ref"], at, depth);
  const Json& list = s[kind];
  if (!list.is_array() || list.empty()) return InvalidField(at, "must be a non-empty array");
  if (kind == "allOf") {
    if (list.size() != 1) return InvalidField(at, "only one schema is supported");
    return Expr(list[0], absl::StrCat(at, "[0]"), depth + 1);
  }
  const auto resolve = [this](const Json& ref) -> const Json* {
    auto resolved = Resolve(ref, "");
    return resolved.ok() ? *resolved : nullptr;
  };
  if (kind == "oneOf" && !BranchesDisjoint(list, resolve)) {
    return InvalidField(at, "branches that may overlap are not supported (use anyOf)");
  }
  std::vector<std::string> alternatives;
  for (size_t i = 0; i < list.size(); ++i) {
    auto e = Expr(list[i], absl::StrCat(at, "[", i, "]"), depth + 1);
    if (!e.ok()) return e.status();
    alternatives.push_back(*e);
  }
  return absl::StrCat("(", absl::StrJoin(alternatives, " | "), ")");
}

absl::StatusOr<std::string> SchemaCompiler::Ref(const Json& ref, const std::string& at, int depth) {
  if (!ref.is_string()) return InvalidField(at, "must be a string");
  const std::string target = ref.get<std::string>();
  if (auto it = refs_.find(target); it != refs_.end()) return it->second;
  auto resolved = Resolve(ref, at);
  if (!resolved.ok()) return resolved.status();
  const std::string name = absl::StrCat("s", ++count_);
  refs_.emplace(target, name);
  std::string inner_path = target.substr(1);
  for (auto& c : inner_path) c = c == '/' ? '.' : c;
  auto body = Expr(**resolved, inner_path, depth + 1);
  if (!body.ok()) return body.status();
  Define(name, *body);
  return name;
}

absl::StatusOr<std::vector<std::string>> SchemaCompiler::Types(const Json& s,
                                                               const std::string& path) {
  std::vector<std::string> types;
  if (s.contains("type")) {
    const Json& t = s["type"];
    if (t.is_string()) types.push_back(t);
    if (t.is_array()) {
      for (const auto& v : t) {
        if (v.is_string()) types.push_back(v);
      }
    }
    if (types.empty() || (t.is_array() && types.size() != t.size())) {
      return InvalidField(Join(path, "type"), "must be a type name or a list of them");
    }
    return types;
  }
  // No type: the types its keywords describe, or any value.
  auto any = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys) {
      if (s.contains(k)) return true;
    }
    return false;
  };
  if (any({"properties", "patternProperties", "required", "additionalProperties", "minProperties",
           "maxProperties", "unevaluatedProperties"})) {
    types.push_back("object");
  }
  if (any({"items", "prefixItems", "minItems", "maxItems", "additionalItems", "uniqueItems"})) {
    types.push_back("array");
  }
  if (any({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
  if (any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})) {
    types.push_back("number");
  }
  return types;
}

absl::StatusOr<std::string> SchemaCompiler::Typed(const Json& s, const std::string& path,
                                                  int depth) {
  auto types = Types(s, path);
  if (!types.ok()) return types.status();
  if (types->empty()) return std::string("value");
  std::vector<std::string> alternatives;
  for (const auto& type : *types) {
    absl::StatusOr<std::string> e;
    if (type == "object") {
      e = Object(s, path, depth);
    } else if (type == "array") {
      e = Array(s, path, depth);
    } else if (type == "string") {
      e = String(s, path);
    } else if (type == "number" || type == "integer") {
      e = Number(s, path, type == "integer");
    } else if (type == "boolean" || type == "null") {
      e = type;
    } else {
      return InvalidField(Join(path, "type"), "'", type, "' is not a JSON Schema type");
    }
    if (!e.ok()) return e.status();
    alternatives.push_back(*e);
  }
  return absl::StrCat("(", absl::StrJoin(alternatives, " | "), ")");
}

absl::StatusOr<std::string> SchemaCompiler::Array(const Json& s, const std::string& path,
                                                  int depth) {
  if (s.contains("uniqueItems") && s["uniqueItems"] != false &&
      !(s.contains("maxItems") && s["maxItems"] == 1)) {
    return InvalidField(Join(path, "uniqueItems"), "is not supported");
  }
  std::vector<std::string> prefix;
  const Json* prefix_list = s.contains("prefixItems")                      ? &s["prefixItems"]
                            : s.contains("items") && s["items"].is_array() ? &s["items"]
                                                                           : nullptr;
  const char* prefix_key = s.contains("prefixItems") ? "prefixItems" : "items";
  if (prefix_list) {
    if (!prefix_list->is_array()) return InvalidField(Join(path, prefix_key), "must be an array");
    for (size_t i = 0; i < prefix_list->size(); ++i) {
      auto e =
          Expr((*prefix_list)[i], absl::StrCat(Join(path, prefix_key), "[", i, "]"), depth + 1);
      if (!e.ok()) return e.status();
      prefix.push_back(*e);
    }
  }
  const char* rest_key =
      prefix_list && std::string(prefix_key) == "items" ? "additionalItems" : "items";
  std::string rest = "value";
  if (s.contains(rest_key) && !(std::string(rest_key) == "items" && s["items"].is_array())) {
    if (s[rest_key] == false) {
      rest.clear();
    } else {
      auto e = Expr(s[rest_key], Join(path, rest_key), depth + 1);
      if (!e.ok()) return e.status();
      rest = *e;
    }
  }
  return Items(s, path, depth, std::move(prefix), std::move(rest));
}

absl::StatusOr<std::string> SchemaCompiler::Items(const Json& s, const std::string& path, int,
                                                  std::vector<std::string> prefix,
                                                  std::string rest) {
  constexpr int64_t kMaxCount = 1000;
  int64_t min = 0, max = -1;
  for (auto [key, out] : {std::pair<const char*, int64_t*>{"minItems", &min}, {"maxItems", &max}}) {
    if (!s.contains(key)) continue;
    // Past kMaxCount items the grammar writes at most kMaxCount: a valid subset.
    if (!s[key].is_number_integer() || s[key].get<int64_t>() < 0 ||
        (out == &min && s[key].get<int64_t>() > kMaxCount)) {
      return InvalidField(Join(path, key), "must be an integer from 0 to ", kMaxCount);
    }
    *out = std::min(s[key].get<int64_t>(), kMaxCount);
  }
  const auto n = static_cast<int64_t>(prefix.size());
  if (rest.empty()) max = max < 0 ? n : std::min(max, n);
  if (max >= 0 && min > max) return InvalidField(Join(path, "minItems"), "no array can satisfy it");
  // Position k: the prefix's schema, then `rest`; from min on optional.
  std::string tail = "\"\"";
  if (!rest.empty() && (max < 0 || max > n)) {
    const int64_t lo = std::max<int64_t>(min - n, 0), hi = max < 0 ? -1 : max - n;
    const std::string item = absl::StrCat("\",\" ws ", rest, " ws");
    tail = absl::StrCat("( ", item, " ){", lo, ",", hi < 0 ? std::string() : absl::StrCat(hi), "}");
    if (n == 0) {  // the first item has no comma
      const std::string first =
          absl::StrCat(rest, " ws ( ", item, " ){", std::max<int64_t>(min - 1, 0), ",",
                       hi < 0 ? std::string() : absl::StrCat(hi - 1), "}");
      if (max == 0) return std::string("( \"[\" ws \"]\" )");
      return Define(
          absl::StrCat("\"[\" ws ", min > 0 ? first : absl::StrCat("( ", first, " )?"), " \"]\""));
    }
  } else if (n == 0) {
    return std::string("( \"[\" ws \"]\" )");
  }
  const int64_t last = max < 0 ? n : std::min(max, n);
  for (int64_t k = last; k-- > 0;) {
    const std::string item = absl::StrCat(k == 0 ? "" : "\",\" ws ", prefix[k], " ws ", tail);
    tail = Define(k >= min ? absl::StrCat("( ", item, " )?") : item);
  }
  return absl::StrCat("( \"[\" ws ", tail, " \"]\" )");
}

absl::StatusOr<std::string> SchemaCompiler::String(const Json& s, const std::string& path) {
  if (s.contains(kNotStrings)) {
    std::vector<std::string> excluded;
    for (const auto& v : s[kNotStrings]) {
      if (!v.is_string()) return InvalidField(Join(path, kNotStrings), "must list strings");
      excluded.push_back(v.get<std::string>());
    }
    for (const char* key : {"format", "pattern", "minLength", "maxLength"}) {
      if (s.contains(key)) {
        return InvalidField(Join(path, "not"), "excluding strings is not supported together with ",
                            key);
      }
    }
    auto except =
        StringExceptGbnf(excluded, [this](const std::string& body) { return Define(body); });
    if (!except) {
      return InvalidField(Join(path, "not"),
                          "only strings of printable ASCII characters can be excluded");
    }
    return *except;
  }
  // A format this does not know is an annotation; a standard one it cannot
  // enforce is refused.
  std::string format;
  if (s.contains("format") && s["format"].is_string()) {
    auto known = FormatGbnf(s["format"].get<std::string>());
    if (!known) return InvalidField(Join(path, "format"), "this format is not supported");
    format = *known;
  }
  std::vector<std::string> used;
  for (const char* key : {"pattern", "minLength", "maxLength"}) {
    if (s.contains(key)) used.push_back(key);
  }
  if (!format.empty() || s.contains("pattern")) {
    const std::string first = format.empty() ? "pattern" : "format";
    for (const auto& other : used) {
      if (other != first) {
        return InvalidField(Join(path, other), "is not supported together with ", first);
      }
    }
  }
  if (!format.empty()) return absl::StrCat("( ", format, " )");
  if (s.contains("pattern")) {
    if (!s["pattern"].is_string()) return InvalidField(Join(path, "pattern"), "must be a string");
    RegexOptions options;
    options.search = options.json_string = true;
    auto body = RegexToGbnf(s["pattern"].get<std::string>(), options);
    if (!body.ok()) return InvalidField(Join(path, "pattern"), body.status().message());
    return absl::StrCat(R"(( "\"" )", *body, R"( "\"" ))");
  }
  if (!s.contains("minLength") && !s.contains("maxLength")) return std::string("string");
  // Past 1,000 characters the grammar writes at most 1,000: a valid subset.
  int64_t bounds[2] = {0, -1};
  for (int i = 0; i < 2; ++i) {
    const char* key = i == 0 ? "minLength" : "maxLength";
    if (!s.contains(key)) continue;
    if (!s[key].is_number_integer() || s[key].get<int64_t>() < 0 ||
        (i == 0 && s[key].get<int64_t>() > 1000)) {
      return InvalidField(Join(path, key), "must be an integer from 0 to 1000");
    }
    bounds[i] = std::min<int64_t>(s[key].get<int64_t>(), 1000);
  }
  if (bounds[1] >= 0 && bounds[1] < bounds[0]) {
    return InvalidField(Join(path, "minLength"), "is above maxLength");
  }
  const std::string most = bounds[1] < 0 ? std::string() : absl::StrCat(bounds[1]);
  return absl::StrCat(R"(( "\"" char{)", bounds[0], ",", most, R"(} "\"" ))");
}

absl::StatusOr<std::string> SchemaCompiler::Number(const Json& s, const std::string& path,
                                                   bool integer) {
  constexpr double kLimit = 4611686018427387904.0;  // 2^62
  std::optional<int64_t> lo, hi;
  if (s.contains("multipleOf") && !(integer && s["multipleOf"] == 1)) {
    return InvalidField(Join(path, "multipleOf"), "is only supported as 1 on integers");
  }
  for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
    if (!s.contains(key)) continue;
    const Json& v = s[key];
    if (v.is_boolean()) continue;  // draft-04's modifiers: read with minimum/maximum below
    if (!v.is_number() || std::fabs(v.get<double>()) > kLimit) {
      return InvalidField(Join(path, key), "must be a number within +-2^62");
    }
    const std::string k = key;
    const bool lower = k.find("inimum") != std::string::npos;
    bool exclusive = k.rfind("exclusive", 0) == 0;
    const char* modifier = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    if (!exclusive && s.contains(modifier) && s[modifier] == true) exclusive = true;
    const double x = v.get<double>();
    if (!integer && (std::floor(x) != x || exclusive)) {
      return InvalidField(Join(path, key),
                          "on numbers only inclusive integer bounds are supported");
    }
    int64_t bound =
        lower ? static_cast<int64_t>(std::ceil(x)) : static_cast<int64_t>(std::floor(x));
    if (exclusive && std::floor(x) == x) bound += lower ? 1 : -1;
    auto& slot = lower ? lo : hi;
    slot = !slot ? bound : lower ? std::max(*slot, bound) : std::min(*slot, bound);
  }
  // OpenAPI's integer formats bound the value (int64 to 18 digits, a subset).
  if (integer && s.contains("format") && (s["format"] == "int32" || s["format"] == "int64")) {
    const int64_t most = s["format"] == "int32" ? int64_t{2147483647} : int64_t{999999999999999999};
    const int64_t least = s["format"] == "int32" ? -most - 1 : -most;
    lo = lo ? std::max(*lo, least) : least;
    hi = hi ? std::min(*hi, most) : most;
  }
  if (lo && hi && *lo > *hi)
    return InvalidField(Join(path, "minimum"), "no number can satisfy the bounds");
  if (!lo && !hi) return std::string(integer ? "integer" : "number");
  return integer ? IntegerRangeGbnf(lo, hi) : NumberRangeGbnf(lo, hi);
}
}  // namespace internal

absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema,
                                             const JsonSchemaOptions& options) {
  return internal::SchemaCompiler(schema, options).Compile();
}

std::string JsonObjectGbnf(const JsonSchemaOptions& options) {
  return absl::StrCat("root ::= object\n", JsonBaseRules(), internal::WhitespaceRule(options));
}

}  // namespace attn::grammar
