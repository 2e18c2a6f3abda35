// What every command of the project does with its Abseil flags.
#pragma once

#include <string>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace attn {

// Whether `flag` is defined in the source file `file` (pass __FILE__).
// Abseil records the path the compiler was given, which may be absolute
// or relative to the build directory; both end in the file's own path.
inline bool IsFlagOfFile(const absl::CommandLineFlag& flag, absl::string_view file) {
  const std::string defined_in = flag.Filename();
  return absl::EndsWith(defined_in, file) || absl::EndsWith(file, defined_in);
}

// Makes --help (and --helpshort) list the flags defined in the folder of
// `main_file` (the command's main.cc, passed as __FILE__). Abseil's default
// lists the flags of files named after the program, which no file here is,
// so --help printed "No flags matched".
inline void ListFlagsOfFolderInHelp(const char* main_file) {
  std::string folder(main_file);
  folder.erase(folder.find_last_of('/') + 1);  // keeps the '/'; empty without one
  absl::FlagsUsageConfig config;
  auto ours = [folder](absl::string_view defined_in) {
    return absl::StartsWith(defined_in, folder) || absl::StrContains(defined_in, "/" + folder);
  };
  config.contains_help_flags = ours;
  config.contains_helpshort_flags = ours;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace attn
