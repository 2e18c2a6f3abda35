// The JSON Schema compiler behind JsonSchemaToGbnf (internal to the
// json_schema*.cc files): one schema becomes GBNF rules, one method per
// kind of schema. Objects live in json_schema_object.cc, the rest in
// json_schema.cc.
#pragma once

#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "model/grammar/json_schema.h"
#include "nlohmann/json.hpp"

namespace attn::grammar::internal {

using Json = nlohmann::ordered_json;

// What `not` of string constants leaves behind: the strings a schema's
// string values may not be (read by String, Enum and const).
inline constexpr char kNotStrings[] = "x-attn-not-strings";

// Keywords of JSON Schema that assert what no grammar here enforces: refused.
const std::vector<std::string>& UnsupportedKeywords();
// Keywords that constrain instances (the rest are annotations).
bool IsConstraint(const std::string& key);

inline std::string Join(const std::string& path, absl::string_view key) {
  return absl::StrCat(path, ".", key);
}

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, const JsonSchemaOptions& options)
      : root_(root), options_(options) {}

  absl::StatusOr<std::string> Compile();

 private:
  // A new rule named s<N> with `body`; returns the name.
  std::string Define(const std::string& body);
  void Define(const std::string& name, const std::string& body);

  absl::StatusOr<std::string> Expr(const Json& s, const std::string& path, int depth);
  // A schema whose combinators have siblings (or an allOf of several):
  // its parts merged into one schema (MergeSchemas), and an anyOf/oneOf's
  // branches each merged with the rest.
  absl::StatusOr<std::string> Merged(const Json& s, const std::string& path, int depth);
  // `not` applied to the rest of `s` as a subset of its complement
  // (json_schema_not.h), then compiled.
  absl::StatusOr<std::string> Negated(const Json& s, const std::string& path, int depth);
  // `rest` narrowed to values that do not match `n` (json_schema_not.cc).
  absl::StatusOr<Json> ApplyNot(Json rest, const Json& n, const std::string& path, int depth);
  absl::StatusOr<Json> NotRequired(Json rest, const Json& names, const std::string& path);
  absl::StatusOr<Json> NotValues(Json rest, const Json& values, const std::string& path);
  // The types `rest` allows (all six where it names none).
  absl::StatusOr<std::vector<std::string>> AllowedTypes(const Json& rest, const std::string& path);
  // `rest` with the `removed` types taken out of those it allows.
  absl::StatusOr<Json> WithTypes(Json rest, const std::set<std::string>& removed,
                                 const std::string& path);
  absl::StatusOr<const Json*> Resolve(const Json& ref, const std::string& at);
  absl::StatusOr<std::string> Enum(const Json& s, const std::string& path);
  absl::StatusOr<std::string> Combinator(const Json& s, const std::string& kind,
                                         const std::string& path, int depth);
  absl::StatusOr<std::string> Ref(const Json& ref, const std::string& at, int depth);
  absl::StatusOr<std::vector<std::string>> Types(const Json& s, const std::string& path);
  absl::StatusOr<std::string> Typed(const Json& s, const std::string& path, int depth);

  absl::StatusOr<std::string> Object(const Json& s, const std::string& path, int depth);
  // The members an object may have past its declared properties, as one
  // GBNF expression ("" for none): patternProperties' keys, and any other
  // key where additionalProperties allows it.
  absl::StatusOr<std::string> ExtraMembers(const Json& s, const std::string& path, int depth,
                                           const std::vector<std::string>& declared);
  // An object of `member`s only, between min_count and max_count of them
  // (-1: no bound).
  absl::StatusOr<std::string> Members(const std::string& member, int64_t min_count,
                                      int64_t max_count, const std::string& path);
  // An object of declared properties in order, then `extra` members.
  absl::StatusOr<std::string> Declared(
      const Json& s, const std::string& path, int depth,
      const std::vector<std::pair<std::string, const Json*>>& properties,
      const std::set<std::string>& required, const std::string& extra);
  absl::StatusOr<std::string> Array(const Json& s, const std::string& path, int depth);
  absl::StatusOr<std::string> String(const Json& s, const std::string& path);
  absl::StatusOr<std::string> Number(const Json& s, const std::string& path, bool integer);
  absl::StatusOr<std::string> Items(const Json& s, const std::string& path, int depth,
                                    std::vector<std::string> prefix, std::string rest);

  const Json& root_;
  JsonSchemaOptions options_;
  std::string rules_;
  std::unordered_map<std::string, std::string> refs_;
  int count_ = 0;
};

}  // namespace attn::grammar::internal
