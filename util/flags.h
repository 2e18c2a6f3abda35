// What every command of the project does with its Abseil flags.
#pragma once

#include <string>
#include <utility>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace attn {

// Whether `flag` is defined in the source file `file` (pass __FILE__).
// Abseil records the path the compiler was given, which may be absolute
// or relative to the build directory; both end in the file's own path.
inline bool IsFlagOfFile(const absl::CommandLineFlag& flag, absl::string_view file) {
  const std::string defined_in = flag.Filename();
  return absl::EndsWith(defined_in, file) || absl::EndsWith(file, defined_in);
}

// The folder part of a source path as a compiler or Abseil recorded it,
// without what differs between builds: leading "/", "./" and "../" (Abseil
// drops the leading "/" of an absolute path; a ccache base directory makes
// the path relative to the build directory). "server/" for all of
// "/work/x/server/main.cc", "work/x/server/main.cc" and "../server/main.cc".
inline absl::string_view SourceFolder(absl::string_view path) {
  path = path.substr(0, path.find_last_of('/') + 1);  // keeps the '/'; empty without one
  while (true) {
    if (absl::ConsumePrefix(&path, "/") || absl::ConsumePrefix(&path, "./") ||
        absl::ConsumePrefix(&path, "../")) {
      continue;
    }
    return path;
  }
}

// Whether one folder path ends with the other at a folder boundary.
inline bool SameFolderTail(absl::string_view a, absl::string_view b) {
  if (a.size() < b.size()) std::swap(a, b);
  if (b.empty() || !absl::EndsWith(a, b)) return false;
  return a.size() == b.size() || a[a.size() - b.size() - 1] == '/';
}

// Makes --help (and --helpshort) list the flags defined in the folder of
// `main_file` (the command's main.cc, passed as __FILE__). Abseil's default
// lists the flags of files named after the program, which no file here is,
// so --help printed "No flags matched".
inline void ListFlagsOfFolderInHelp(const char* main_file) {
  const std::string folder(SourceFolder(main_file));
  absl::FlagsUsageConfig config;
  auto ours = [folder](absl::string_view defined_in) {
    return SameFolderTail(SourceFolder(defined_in), folder);
  };
  config.contains_help_flags = ours;
  config.contains_helpshort_flags = ours;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace attn
