// Objects: declared properties in definition order, then the members that
// patternProperties and additionalProperties allow.
#include <algorithm>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/grammar/grammar.h"
#include "model/grammar/json_schema_compiler.h"
#include "model/grammar/json_schema_leaves.h"
#include "model/grammar/matcher.h"
#include "model/grammar/regex.h"
#include "util/field_error.h"

namespace attn::grammar::internal {
namespace {

constexpr int64_t kMaxMembers = 1000;

// A schema no value matches: false, or `not` of anything.
bool MatchesNothing(const Json& s) {
  if (s.is_boolean()) return !s.get<bool>();
  if (!s.is_object() || !s.contains("not")) return false;
  const Json& n = s["not"];
  return (n.is_boolean() && n.get<bool>()) || (n.is_object() && n.empty());
}

// The grammar of a pattern as JSON Schema's `pattern` reads it, over the
// inside of a JSON string.
absl::StatusOr<std::string> PatternGbnf(const std::string& pattern) {
  RegexOptions options;
  options.search = options.json_string = true;
  return RegexToGbnf(pattern, options);
}

// Whether the key `name` matches the pattern whose grammar is `body`.
absl::StatusOr<bool> KeyMatches(const std::string& body, const std::string& name) {
  static const auto* bytes = new std::shared_ptr<const TokenTrie>([] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    return std::make_shared<const TokenTrie>(tokens);
  }());
  auto grammar = Grammar::FromGbnf(absl::StrCat("root ::= ", body, "\n"));
  if (!grammar.ok()) return grammar.status();
  GrammarMatcher matcher(std::make_shared<const Grammar>(*std::move(grammar)), *bytes);
  const std::string text = Json(name).dump();
  return matcher.Accept(text.substr(1, text.size() - 2)) && matcher.CanEnd();
}

// One schema that asserts all of `parts` (a single part as it is).
Json AllOf(const std::vector<const Json*>& parts) {
  Json all = Json::array();
  for (const Json* part : parts) {
    if (!(part->is_boolean() && part->get<bool>())) all.push_back(*part);
  }
  if (all.empty()) return Json(true);
  if (all.size() == 1) return all[0];
  return Json{{"allOf", std::move(all)}};
}

}  // namespace

absl::StatusOr<std::string> SchemaCompiler::ExtraMembers(const Json& s, const std::string& path,
                                                         int depth,
                                                         const std::vector<std::string>& declared) {
  // A key matching several patterns must satisfy all their schemas: every
  // pattern key's value satisfies all of them (a valid subset).
  std::vector<std::pair<std::string, std::string>> patterns;  // grammar, path
  std::vector<const Json*> pattern_schemas;
  if (s.contains("patternProperties")) {
    const std::string at = Join(path, "patternProperties");
    if (!s["patternProperties"].is_object()) return InvalidField(at, "must be an object");
    for (const auto& item : s["patternProperties"].items()) {
      auto body = PatternGbnf(item.key());
      if (!body.ok()) return InvalidField(Join(at, item.key()), body.status().message());
      patterns.emplace_back(*body, Join(at, item.key()));
      pattern_schemas.push_back(&item.value());
    }
  }
  const Json* additional = nullptr;
  static const Json kAny = true;
  if (!s.contains("additionalProperties") || s["additionalProperties"] != false) {
    additional = s.contains("additionalProperties") ? &s["additionalProperties"] : &kAny;
  }
  if (s.contains("unevaluatedProperties")) {
    if (s["unevaluatedProperties"] != false) {
      return InvalidField(Join(path, "unevaluatedProperties"), "only false is supported");
    }
    additional = nullptr;
  }
  std::vector<std::string> alternatives;
  auto member = [&](const std::string& key, std::vector<const Json*> parts,
                    const std::string& at) -> absl::Status {
    parts.insert(parts.end(), pattern_schemas.begin(), pattern_schemas.end());
    auto value = Expr(AllOf(parts), at, depth + 1);
    if (!value.ok()) return value.status();
    alternatives.push_back(absl::StrCat(key, " ws \":\" ws ", *value, " ws"));
    return absl::OkStatus();
  };
  if (additional) {
    // Any key but the declared ones (the value also satisfies every
    // pattern's schema, so it is right whichever patterns the key matches).
    auto key = StringExceptGbnf(declared, [this](const std::string& body) { return Define(body); });
    if (key) {
      absl::Status added = member(*key, {additional}, Join(path, "additionalProperties"));
      if (!added.ok()) return added;
    }
  } else {
    for (const auto& [body, at] : patterns) {
      // A declared name that matches would be written twice: such a
      // pattern's keys are left out (a valid subset).
      bool clash = false;
      for (const auto& name : declared) {
        auto matches = KeyMatches(body, name);
        if (!matches.ok()) return InvalidField(at, matches.status().message());
        clash = clash || *matches;
      }
      if (clash) continue;
      absl::Status added = member(absl::StrCat(R"(( "\"" )", body, R"( "\"" ))"), {}, at);
      if (!added.ok()) return added;
    }
  }
  if (alternatives.empty()) return std::string();
  return Define(absl::StrJoin(alternatives, " | "));
}

absl::StatusOr<std::string> SchemaCompiler::Object(const Json& s, const std::string& path,
                                                   int depth) {
  std::vector<std::pair<std::string, const Json*>> properties;
  static const Json kAny = true;
  if (s.contains("properties")) {
    if (!s["properties"].is_object())
      return InvalidField(Join(path, "properties"), "must be an object");
    for (const auto& item : s["properties"].items())
      properties.emplace_back(item.key(), &item.value());
  }
  std::set<std::string> required;
  if (s.contains("required")) {
    const Json& list = s["required"];
    if (!list.is_array()) return InvalidField(Join(path, "required"), "must be an array of names");
    for (const auto& name : list) {
      if (!name.is_string())
        return InvalidField(Join(path, "required"), "must be an array of names");
      required.insert(name.get<std::string>());
    }
  }
  for (const auto& name : required) {
    bool declared = false;
    for (const auto& p : properties) declared = declared || p.first == name;
    if (!declared) properties.emplace_back(name, &kAny);
  }
  // Every declared name (forbidden ones too) is kept out of the extra keys.
  std::vector<std::string> declared;
  for (const auto& p : properties) declared.push_back(p.first);
  auto forbidden = std::remove_if(properties.begin(), properties.end(),
                                  [&](const auto& p) { return MatchesNothing(*p.second); });
  for (auto it = forbidden; it != properties.end(); ++it) {
    if (required.count(it->first)) {
      return InvalidField(Join(Join(path, "properties"), it->first),
                          "a required property that no value matches");
    }
  }
  properties.erase(forbidden, properties.end());
  auto extra = ExtraMembers(s, path, depth, declared);
  if (!extra.ok()) return extra.status();
  int64_t min_count = 0, max_count = -1;
  for (const char* key : {"minProperties", "maxProperties"}) {
    if (!s.contains(key)) continue;
    if (!s[key].is_number_integer() || s[key].get<int64_t>() < 0) {
      return InvalidField(Join(path, key), "must be a non-negative integer");
    }
    (std::string(key) == "minProperties" ? min_count : max_count) =
        std::min(s[key].get<int64_t>(), kMaxMembers);
  }
  if (properties.empty()) return Members(*extra, min_count, max_count, path);
  if (min_count > static_cast<int64_t>(required.size())) {
    return InvalidField(Join(path, "minProperties"),
                        "above the number of required properties is not supported");
  }
  if (max_count >= 0) {
    if (max_count < static_cast<int64_t>(properties.size())) {
      return InvalidField(Join(path, "maxProperties"),
                          "below the number of properties is not supported");
    }
    extra->clear();  // the declared properties alone: a valid subset
  }
  return Declared(s, path, depth, properties, required, *extra);
}

absl::StatusOr<std::string> SchemaCompiler::Members(const std::string& member, int64_t min_count,
                                                    int64_t max_count, const std::string& path) {
  if (max_count >= 0 && min_count > max_count) {
    return InvalidField(Join(path, "minProperties"), "is above maxProperties");
  }
  if (member.empty() || max_count == 0) {
    if (min_count > 0) return InvalidField(Join(path, "minProperties"), "no key is allowed");
    return std::string("( \"{\" ws \"}\" )");
  }
  const std::string more =
      absl::StrCat("( \",\" ws ", member, " ){", std::max<int64_t>(min_count - 1, 0), ",",
                   max_count < 0 ? std::string() : absl::StrCat(max_count - 1), "}");
  const std::string body = absl::StrCat(member, " ", more);
  return Define(
      absl::StrCat("\"{\" ws ", min_count > 0 ? body : absl::StrCat("( ", body, " )?"), " \"}\""));
}

absl::StatusOr<std::string> SchemaCompiler::Declared(
    const Json& s, const std::string& path, int depth,
    const std::vector<std::pair<std::string, const Json*>>& properties,
    const std::set<std::string>& required, const std::string& extra) {
  // A declared name that matches a pattern satisfies that pattern's schema too.
  std::vector<std::pair<std::string, const Json*>> patterns;  // grammar, schema
  if (s.contains("patternProperties")) {
    for (const auto& item : s["patternProperties"].items()) {
      auto body = PatternGbnf(item.key());
      if (!body.ok()) return body.status();  // ExtraMembers reported it
      patterns.emplace_back(*body, &item.value());
    }
  }
  // head(k): members from k on, none written yet; tail(k): some written;
  // past the last, the extra members.
  const size_t n = properties.size();
  std::vector<std::string> members(n);
  for (size_t k = 0; k < n; ++k) {
    const std::string at = Join(Join(path, "properties"), properties[k].first);
    std::vector<const Json*> parts{properties[k].second};
    for (const auto& [body, schema] : patterns) {
      auto matches = KeyMatches(body, properties[k].first);
      if (!matches.ok()) return InvalidField(at, matches.status().message());
      if (*matches) parts.push_back(schema);
    }
    auto value =
        parts.size() == 1 ? Expr(*parts[0], at, depth + 1) : Expr(AllOf(parts), at, depth + 1);
    if (!value.ok()) return value.status();
    members[k] =
        absl::StrCat(GbnfLiteral(Json(properties[k].first).dump()), " ws \":\" ws ", *value, " ws");
  }
  std::string tail = "\"\"", head = "\"\"";
  if (!extra.empty()) {
    tail = Define(absl::StrCat("( \",\" ws ", extra, " )*"));
    head = Define(absl::StrCat("( ", extra, " ", tail, " )?"));
  }
  for (size_t k = n; k-- > 0;) {
    const bool needed = required.count(properties[k].first) > 0;
    const std::string next_tail = tail;
    tail = needed ? Define(absl::StrCat("\",\" ws ", members[k], " ", next_tail))
                  : Define(absl::StrCat("( \",\" ws ", members[k], " )? ", next_tail));
    head = needed ? Define(absl::StrCat(members[k], " ", next_tail))
                  : Define(absl::StrCat(members[k], " ", next_tail, " | ", head));
  }
  return absl::StrCat("( \"{\" ws ", head, " \"}\" )");
}

}  // namespace attn::grammar::internal
