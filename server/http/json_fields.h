// Reading OpenAI request bodies field by field: what every endpoint's
// parser shares. Errors are kInvalidArgument in util/field_error.h's format,
// "field: what is wrong".
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace attn::serving::http {

// Keys in the order sent: chat templates see them so.
using Json = nlohmann::ordered_json;

// Reads a present, non-null field; absent or null leaves the default.
class Fields {
 public:
  explicit Fields(const Json& json) : json_(json) {}
  bool Has(const char* key) const { return json_.contains(key) && !json_[key].is_null(); }
  const Json& operator[](const char* key) const { return json_[key]; }

  absl::Status Number(const char* key, double lo, double hi, double* out) const;
  absl::Status Integer(const char* key, int64_t lo, int64_t hi, int64_t* out) const;
  absl::Status Bool(const char* key, bool* out) const;
  absl::Status String(const char* key, std::string* out) const;

 private:
  const Json& json_;
};

// A body's JSON object, every field of it one of `known` (any other is
// refused by name), or "body: invalid JSON at byte N".
absl::StatusOr<Json> ParseBody(absl::string_view body, const std::set<std::string>& known);

// OpenAI's rule for function names: 1 to 64 of [a-zA-Z0-9_-].
bool IsFunctionName(const std::string& name);

}  // namespace attn::serving::http
