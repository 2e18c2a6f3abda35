// Reading a whole file, for the places that take one from a flag.
// Header-only: attnctl, which links no LibTorch, uses it too.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace attn {

// The bytes of the file at `path`, in one buffer of the file's size (a
// model package is gigabytes: a growing string stream held up to three
// copies at once); a file that cannot seek (a pipe) is read as a stream.
// kNotFound "<prefix><path>: cannot read it" when it cannot be read,
// `prefix` naming where the path came from ("--tls_ca=").
inline absl::StatusOr<std::string> ReadFileBytes(const std::string& path,
                                                 const std::string& prefix = "") {
  const auto unreadable = [&] {
    return absl::NotFoundError(absl::StrCat(prefix, path, ": cannot read it"));
  };
  std::ifstream file(path, std::ios::binary);
  if (!file) return unreadable();
  const std::streamoff size =
      file.seekg(0, std::ios::end) ? static_cast<std::streamoff>(file.tellg()) : -1;
  file.clear();
  if (size > 0 && file.seekg(0)) {
    std::string bytes(static_cast<size_t>(size), '\0');
    if (!file.read(bytes.data(), size) || file.peek() != std::ifstream::traits_type::eof()) {
      return unreadable();  // short, or grew while read
    }
    return bytes;
  }
  file.clear();
  std::ostringstream contents;
  contents << file.rdbuf();
  if (!file) return unreadable();
  return contents.str();
}

}  // namespace attn
