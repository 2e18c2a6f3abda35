// Configuration names of enums: one table per enum, the lookups shared.
// Internal to model/.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

namespace attn {

template <typename Enum, size_t N>
std::string EnumName(const std::pair<Enum, const char*> (&table)[N], Enum value) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return "unknown";
}

// Sets *value and returns true if `name` is in the table.
template <typename Enum, size_t N>
bool ParseEnumName(const std::pair<Enum, const char*> (&table)[N], const std::string& name,
                   Enum* value) {
  for (const auto& [v, n] : table) {
    if (name == n) {
      *value = v;
      return true;
    }
  }
  return false;
}

}  // namespace attn
