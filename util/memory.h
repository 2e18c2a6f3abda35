// How much memory this process may still fill: the check a backend makes
// before allocating state that it writes at once (torch::zeros touches every
// page), so that too many rows fail with a message instead of the kernel's
// out-of-memory killer ending the process.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace attn {

// MemAvailable of a /proc/meminfo text, in bytes; nullopt when absent or
// unreadable.
std::optional<int64_t> MemAvailableFromMeminfo(absl::string_view meminfo);

// A cgroup v2 limit's headroom: memory.max less memory.current, in bytes (0
// when over); nullopt for "max" (no limit) or a text that does not parse.
std::optional<int64_t> CgroupV2Headroom(absl::string_view memory_max,
                                        absl::string_view memory_current);

// min(MemAvailable, the cgroup's headroom: a container's --memory or a
// Kubernetes memory limit); nullopt when neither can be read.
std::optional<int64_t> AvailableMemoryBytes();

}  // namespace attn
