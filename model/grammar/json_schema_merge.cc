#include "model/grammar/json_schema_merge.h"

#include <algorithm>
#include <map>
#include <set>

namespace attn::grammar {

using Json = nlohmann::ordered_json;

namespace {

// The types two `type` values both allow ("integer" is a number); nullopt
// when none, or when one is not a type list.
std::optional<Json> CommonTypes(const Json& a, const Json& b) {
  auto list = [](const Json& t) {
    std::vector<std::string> names;
    for (const auto& name : t.is_array() ? t : Json::array({t})) {
      if (!name.is_string()) return std::vector<std::string>{};
      names.push_back(name.get<std::string>());
    }
    return names;
  };
  const auto x = list(a), y = list(b);
  auto has = [](const std::vector<std::string>& names, const std::string& t) {
    return std::find(names.begin(), names.end(), t) != names.end();
  };
  Json out = Json::array();
  for (const auto& t : x) {
    if (has(y, t) || (t == "integer" && has(y, "number"))) out.push_back(t);
  }
  for (const auto& t : y) {
    if (t == "integer" && has(x, "number") && !has(x, "integer")) out.push_back(t);
  }
  if (out.empty()) return std::nullopt;
  if (out.size() == 1) return out[0];
  return out;
}

}  // namespace

std::optional<Json> MergeSchemas(const std::vector<Json>& parts, std::string* conflict) {
  conflict->clear();
  Json out = Json::object();
  // additionalProperties (and unevaluatedProperties, which sees no
  // annotations across a $ref) judges only its own part's properties, and
  // items only its own part's prefixItems: merged with another part's they
  // would judge those too.
  std::vector<size_t> with_properties, with_additional, with_prefix, with_rest;
  for (const Json& part : parts) {
    if (part.is_boolean() && part.get<bool>()) continue;
    if (!part.is_object()) {
      *conflict = "allOf";
      return std::nullopt;
    }
    const size_t index = static_cast<size_t>(&part - parts.data());
    if (part.contains("properties") || part.contains("patternProperties")) {
      with_properties.push_back(index);
    }
    for (const char* key : {"additionalProperties", "unevaluatedProperties"}) {
      if (part.contains(key) && part[key] != true) with_additional.push_back(index);
    }
    if (part.contains("prefixItems") || (part.contains("items") && part["items"].is_array())) {
      with_prefix.push_back(index);
    }
    if (part.contains("additionalItems") ||
        (part.contains("items") && !part["items"].is_array() && part["items"] != true)) {
      with_rest.push_back(index);
    }
    for (const auto& item : part.items()) {
      const std::string& key = item.key();
      if (key == "$ref") {
        *conflict = key;
        return std::nullopt;
      }
      if (!out.contains(key) || out[key] == item.value()) {
        out[key] = item.value();
      } else if (key == "type") {
        auto both = CommonTypes(out[key], item.value());
        if (!both) {
          *conflict = key;
          return std::nullopt;
        }
        out[key] = *both;
      } else if (key == "required" && out[key].is_array() && item.value().is_array()) {
        for (const auto& name : item.value()) {
          if (std::find(out[key].begin(), out[key].end(), name) == out[key].end()) {
            out[key].push_back(name);
          }
        }
      } else if (key == "properties" && out[key].is_object() && item.value().is_object()) {
        for (const auto& property : item.value().items()) {
          Json& slot = out[key][property.key()];
          slot = slot.is_null() ? property.value()
                                : Json{{"allOf", Json::array({slot, property.value()})}};
        }
      } else if (key == "$defs" || key == "definitions" || key == "title" || key == "description" ||
                 key == "examples" || key == "default" || key == "$comment" || key == "$schema" ||
                 key == "$id") {
        continue;  // annotations: the first part's stays
      } else {
        *conflict = key;
        return std::nullopt;
      }
    }
  }
  for (size_t a : with_additional) {
    for (size_t other : with_properties) {
      if (other != a) *conflict = "additionalProperties";
    }
    if (with_additional.size() > 1) *conflict = "additionalProperties";
  }
  for (size_t r : with_rest) {
    for (size_t other : with_prefix) {
      if (other != r) *conflict = "items";
    }
  }
  if (!conflict->empty()) return std::nullopt;
  return out;
}

namespace {

// The types a value has ("integer" values are numbers too).
std::set<std::string> TypesOf(const Json& v) {
  if (v.is_number_integer() || v.is_number_unsigned() ||
      (v.is_number_float() &&
       v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())))) {
    return {"integer", "number"};
  }
  if (v.is_number()) return {"number"};
  if (v.is_string()) return {"string"};
  if (v.is_boolean()) return {"boolean"};
  if (v.is_null()) return {"null"};
  return {v.is_array() ? "array" : "object"};
}

struct Facts {
  std::optional<std::set<std::string>> types;  // unset: any
  std::optional<std::vector<Json>> values;     // const or enum
  std::set<std::string> required;
  bool closed = false;  // additionalProperties: false
  std::set<std::string> declared;
  std::map<std::string, std::vector<Json>> constants;  // property: its const or enum
};

std::optional<std::vector<Json>> ValuesOf(const Json& s) {
  if (!s.is_object()) return std::nullopt;
  if (s.contains("const")) return std::vector<Json>{s["const"]};
  if (s.contains("enum") && s["enum"].is_array()) return s["enum"].get<std::vector<Json>>();
  return std::nullopt;
}

Facts FactsOf(const Json& s) {
  Facts f;
  if (!s.is_object()) return f;
  if (s.contains("type")) {
    std::set<std::string> types;
    for (const auto& t : s["type"].is_array() ? s["type"] : Json::array({s["type"]})) {
      if (t.is_string()) types.insert(t.get<std::string>());
    }
    if (types.count("number")) types.insert("integer");
    f.types = types;
  }
  f.values = ValuesOf(s);
  if (f.values && !f.types) {
    f.types.emplace();
    for (const auto& v : *f.values) {
      for (const auto& t : TypesOf(v)) f.types->insert(t);
    }
  }
  if (s.contains("required") && s["required"].is_array()) {
    for (const auto& r : s["required"]) {
      if (r.is_string()) f.required.insert(r.get<std::string>());
    }
  }
  f.closed = s.contains("additionalProperties") && s["additionalProperties"] == false;
  if (s.contains("properties") && s["properties"].is_object()) {
    for (const auto& p : s["properties"].items()) {
      f.declared.insert(p.key());
      if (auto values = ValuesOf(p.value())) f.constants[p.key()] = *values;
    }
  }
  return f;
}

bool NoneShared(const std::vector<Json>& a, const std::vector<Json>& b) {
  for (const auto& x : a) {
    if (std::find(b.begin(), b.end(), x) != b.end()) return false;
  }
  return true;
}

bool Disjoint(const Facts& a, const Facts& b) {
  if (a.types && b.types) {
    bool meet = false;
    for (const auto& t : *a.types) meet = meet || b.types->count(t) > 0;
    if (!meet) return true;
  }
  if (a.values && b.values && NoneShared(*a.values, *b.values)) return true;
  for (const auto& p : a.required) {
    if (b.required.count(p) && a.constants.count(p) && b.constants.count(p) &&
        NoneShared(a.constants.at(p), b.constants.at(p))) {
      return true;
    }
    if (b.closed && !b.declared.count(p)) return true;
  }
  for (const auto& p : b.required) {
    if (a.closed && !a.declared.count(p)) return true;
  }
  return false;
}

}  // namespace

bool BranchesDisjoint(const Json& branches,
                      const std::function<const Json*(const Json&)>& resolve) {
  std::vector<Facts> facts;
  for (const auto& branch : branches) {
    const Json* b = &branch;
    if (b->is_object() && b->contains("$ref")) {
      b = resolve((*b)["$ref"]);
      if (b == nullptr) return false;
    }
    facts.push_back(FactsOf(*b));
  }
  for (size_t i = 0; i < facts.size(); ++i) {
    for (size_t j = i + 1; j < facts.size(); ++j) {
      if (!Disjoint(facts[i], facts[j])) return false;
    }
  }
  return true;
}

}  // namespace attn::grammar
