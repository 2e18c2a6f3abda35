// The one format of a rejected input: "field: problem", where field names
// what the caller wrote (a request field, a config key, a flag) exactly as
// they wrote it, so that they know what to fix. The field also travels as a
// payload of the status, so that a protocol that reports it on its own (the
// HTTP API's error `param`) reads it from there, never from the message.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace attn {

// The payload's type URL; its value is the field's name.
inline constexpr absl::string_view kFieldPayload = "type.googleapis.com/attn.v1.Field";

// A status of `code` with the message "field: " followed by the pieces of
// `problem` (anything absl::StrCat takes), carrying `field`.
template <typename... Problem>
absl::Status FieldError(absl::StatusCode code, absl::string_view field, const Problem&... problem) {
  absl::Status status(code, absl::StrCat(field, ": ", problem...));
  status.SetPayload(kFieldPayload, absl::Cord(field));
  return status;
}

// kInvalidArgument, the usual FieldError.
template <typename... Problem>
absl::Status InvalidField(absl::string_view field, const Problem&... problem) {
  return FieldError(absl::StatusCode::kInvalidArgument, field, problem...);
}

// The field `status` carries; empty for none.
inline std::string FieldOf(const absl::Status& status) {
  auto field = status.GetPayload(kFieldPayload);
  return field ? std::string(*field) : std::string();
}

// `status` with `prefix` put before both its message and its field (an
// extension's fields are its prefix plus the inner field's name).
inline absl::Status PrefixField(const absl::Status& status, absl::string_view prefix) {
  if (status.ok()) return status;
  absl::Status prefixed(status.code(), absl::StrCat(prefix, status.message()));
  if (std::string field = FieldOf(status); !field.empty()) {
    prefixed.SetPayload(kFieldPayload, absl::Cord(absl::StrCat(prefix, field)));
  }
  return prefixed;
}

}  // namespace attn
