#include "server/http/json_fields.h"

#include <cctype>

#include "absl/strings/str_cat.h"
#include "util/field_error.h"

namespace attn::serving::http {

absl::Status Fields::Number(const char* key, double lo, double hi, double* out) const {
  if (!Has(key)) return absl::OkStatus();
  if (!json_[key].is_number()) return InvalidField(key, "must be a number");
  const double value = json_[key].get<double>();
  if (!(value >= lo && value <= hi)) {
    return InvalidField(key, absl::StrCat(value, " is outside [", lo, ", ", hi, "]"));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status Fields::Integer(const char* key, int64_t lo, int64_t hi, int64_t* out) const {
  if (!Has(key)) return absl::OkStatus();
  if (!json_[key].is_number_integer()) return InvalidField(key, "must be an integer");
  const int64_t value = json_[key].get<int64_t>();
  if (value < lo || value > hi) {
    return InvalidField(key, absl::StrCat(value, " is outside [", lo, ", ", hi, "]"));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status Fields::Bool(const char* key, bool* out) const {
  if (!Has(key)) return absl::OkStatus();
  if (!json_[key].is_boolean()) return InvalidField(key, "must be true or false");
  *out = json_[key].get<bool>();
  return absl::OkStatus();
}

absl::Status Fields::String(const char* key, std::string* out) const {
  if (!Has(key)) return absl::OkStatus();
  if (!json_[key].is_string()) return InvalidField(key, "must be a string");
  *out = json_[key].get<std::string>();
  return absl::OkStatus();
}

absl::StatusOr<Json> ParseBody(absl::string_view body, const std::set<std::string>& known) {
  Json json;
  try {
    json = Json::parse(body);
  } catch (const Json::parse_error& e) {
    return InvalidField("body", absl::StrCat("invalid JSON at byte ", e.byte));
  } catch (const Json::exception& e) {  // a number out of range, ...
    return InvalidField("body", absl::StrCat("invalid JSON: ", e.what()));
  }
  if (!json.is_object()) return InvalidField("body", "must be a JSON object");
  for (const auto& item : json.items()) {
    if (item.key().empty()) return InvalidField("body", "has a field without a name");
    if (!known.count(item.key())) {
      return InvalidField(item.key(), "is not a field this server implements (docs/openai.md)");
    }
  }
  return json;
}

bool IsFunctionName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

}  // namespace attn::serving::http
