#include "util/memory.h"

#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "util/files.h"

namespace attn {
namespace {

// The file's text, or "" when it cannot be read (no cgroup v2, no /proc).
std::string ReadWhole(const char* path) { return ReadFileBytes(path).value_or(""); }

std::optional<int64_t> ParseCount(absl::string_view text) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value) || value < 0) {
    return std::nullopt;
  }
  return value;
}

}  // namespace

std::optional<int64_t> MemAvailableFromMeminfo(absl::string_view meminfo) {
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumeSuffix(&line, "kB")) return std::nullopt;
    std::optional<int64_t> kib = ParseCount(line);
    if (!kib.has_value() || *kib > (INT64_MAX >> 10)) return std::nullopt;
    return *kib << 10;
  }
  return std::nullopt;
}

std::optional<int64_t> CgroupV2Headroom(absl::string_view memory_max,
                                        absl::string_view memory_current) {
  std::optional<int64_t> limit = ParseCount(memory_max);
  std::optional<int64_t> used = ParseCount(memory_current);
  if (!limit.has_value() || !used.has_value()) return std::nullopt;
  return std::max<int64_t>(0, *limit - *used);
}

std::optional<int64_t> AvailableMemoryBytes() {
  std::optional<int64_t> available = MemAvailableFromMeminfo(ReadWhole("/proc/meminfo"));
  std::optional<int64_t> headroom = CgroupV2Headroom(ReadWhole("/sys/fs/cgroup/memory.max"),
                                                     ReadWhole("/sys/fs/cgroup/memory.current"));
  if (available.has_value() && headroom.has_value()) return std::min(*available, *headroom);
  return available.has_value() ? available : headroom;
}

}  // namespace attn
