// Reading a whole file, for the places that take one from a flag.
// Header-only: attnctl, which links no LibTorch, uses it too.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace attn {

// The bytes of the file at `path`. kNotFound "<prefix><path>: cannot read
// it" when it cannot be read, `prefix` naming where the path came from
// ("--tls_ca=").
inline absl::StatusOr<std::string> ReadFileBytes(const std::string& path,
                                                 const std::string& prefix = "") {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  if (!file) return absl::NotFoundError(absl::StrCat(prefix, path, ": cannot read it"));
  return contents.str();
}

}  // namespace attn
