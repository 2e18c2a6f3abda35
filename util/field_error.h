// The one format of a rejected input: "field: problem", where field names
// what the caller wrote (a request field, a config key, a flag) exactly as
// they wrote it, so that they know what to fix.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace attn {

// kInvalidArgument with the message "field: " followed by the pieces of
// `problem` (anything absl::StrCat takes).
template <typename... Problem>
absl::Status InvalidField(absl::string_view field, const Problem&... problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem...));
}

}  // namespace attn
