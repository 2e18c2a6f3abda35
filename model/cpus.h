// How many CPUs this process may really use: the affinity mask, capped by a
// cgroup CPU quota (a container's --cpus or a Kubernetes CPU limit), which
// std::thread::hardware_concurrency() ignores. Intra-op threads beyond it only
// contend for the same quota.
#pragma once

#include <optional>
#include <string>

namespace attn {

// CPUs from a cgroup v2 cpu.max line ("150000 100000" -> 2, rounding up);
// nullopt for "max" (no quota) or a line that does not parse.
std::optional<int> CpusFromCgroupV2(const std::string& cpu_max);

// min(affinity mask, cgroup quota), at least 1.
int UsableCpus();

// Sets LibTorch's intra-op threads to `requested`, or to UsableCpus() when
// `requested` <= 0, and returns the number set. Call before any tensor op:
// Debian's LibTorch otherwise starts with one thread.
int ConfigureThreads(int requested);

}  // namespace attn
