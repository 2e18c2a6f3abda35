// Merging the parts of one JSON Schema (an allOf's members, a $ref's
// target and its siblings) into one schema with the same valid instances,
// where that is plain (internal to json_schema.cc).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace attn::grammar {

// The schema that asserts every part's keywords, when no two parts assert
// the same keyword differently: equal values are kept, `required` lists
// joined, `properties` joined (a property in two parts gets the allOf of
// both). nullopt otherwise, with `conflict` naming the keyword; also when
// one part's additionalProperties would judge another part's properties
// (merged, they would count as declared). `true` parts add nothing; a
// `false` part, a $ref left in a part, or a part that is not a schema is a
// conflict.
std::optional<nlohmann::ordered_json> MergeSchemas(const std::vector<nlohmann::ordered_json>& parts,
                                                   std::string* conflict);

// Whether no value can match two of `branches` (oneOf as anyOf is then
// exact): for each pair, their types (type, const, enum) cannot meet, or
// their constants differ, or as objects a property both require has
// constants that differ (a discriminator), or one requires a property the
// other's additionalProperties: false forbids. A branch that is a $ref is
// judged as what `resolve` gives for it (null: not resolvable, not disjoint).
bool BranchesDisjoint(
    const nlohmann::ordered_json& branches,
    const std::function<const nlohmann::ordered_json*(const nlohmann::ordered_json&)>& resolve);

}  // namespace attn::grammar
