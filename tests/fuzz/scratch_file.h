// A file of the fuzz targets' own for inputs that must pass through a path
// (model packages are opened by name): $TMPDIR/NAME.PID.pt, one per process
// so that parallel fuzzing jobs do not share it.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace attn::fuzzing {

inline std::string ScratchPath(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/" + name + "." +
         std::to_string(getpid()) + ".pt";
}

}  // namespace attn::fuzzing
