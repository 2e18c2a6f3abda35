// A strict reader and writer for flat JSON objects: {"key": value, ...} whose
// values are strings, numbers or booleans. Model configurations are exactly
// that, and no JSON library is among the project's Debian dependencies.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace attn {

class FlatJson {
 public:
  // Parses `text`; an error names the offset and what was expected. Nested
  // objects, arrays and null are rejected.
  static absl::StatusOr<FlatJson> Parse(std::string_view text);

  void SetString(const std::string& key, const std::string& value);
  void SetInt(const std::string& key, int64_t value);
  void SetDouble(const std::string& key, double value);
  void SetBool(const std::string& key, bool value);

  bool Has(const std::string& key) const { return values_.count(key) > 0; }
  std::vector<std::string> Keys() const;
  // Each getter fails with kInvalidArgument naming the key if it is missing
  // or of another type.
  absl::StatusOr<std::string> GetString(const std::string& key) const;
  absl::StatusOr<int64_t> GetInt(const std::string& key) const;
  absl::StatusOr<double> GetDouble(const std::string& key) const;
  absl::StatusOr<bool> GetBool(const std::string& key) const;

  // Keys in sorted order, one per line, so a diff of two configs reads well.
  std::string Serialize() const;

 private:
  enum class Type { kString, kNumber, kBool };
  struct Value {
    Type type;
    std::string text;  // the string, or the number/bool as written
  };
  absl::StatusOr<const Value*> Find(const std::string& key, Type type) const;

  std::map<std::string, Value> values_;
};

}  // namespace attn
