// Process-wide CPU runtime settings for serving: how many CPUs this process
// may really use (the affinity mask, capped by a cgroup CPU quota, a
// container's --cpus or a Kubernetes CPU limit, which
// std::thread::hardware_concurrency() ignores; intra-op threads beyond it only
// contend for the same quota), LibTorch's thread count, which CPUs a thread
// runs on, and the C allocator.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attn {

// CPUs from a cgroup v2 cpu.max line ("150000 100000" -> 2, rounding up);
// nullopt for "max" (no quota) or a line that does not parse.
std::optional<int> CpusFromCgroupV2(const std::string& cpu_max);

// min(affinity mask, cgroup quota), at least 1.
int UsableCpus();

// The CPUs the calling thread may run on (its affinity mask; at startup,
// the process's), ascending.
std::vector<int> AllowedCpus();

// A CPU list as taskset and cpusets write it: "3", "0-3", "0,2-3". Returns
// the CPUs ascending, without repeats; INVALID_ARGUMENT naming the part that
// does not parse (or a range whose end is below its start).
absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text);

// Formats CPUs back as a list ("0-3,6"); "" when empty.
std::string FormatCpuList(const std::vector<int>& cpus);

// Restricts the calling thread, and the threads it starts afterwards (which
// inherit its mask: an engine thread's OpenMP team included), to `cpus`.
// Check them against AllowedCpus() first: the kernel drops CPUs outside the
// process's cpuset and fails (INVALID_ARGUMENT here) only when none is left.
//
// Why: on a box the serving threads share with the model, a core taken from
// a decode step by a gRPC thread stalls every thread of that step; keeping
// the engine and the serving layer on disjoint CPUs lets both run at once.
absl::Status PinCallingThread(const std::vector<int>& cpus);

// Sets LibTorch's intra-op threads to `requested`, or to UsableCpus() when
// `requested` <= 0, and returns the number set. Call before any tensor op:
// Debian's LibTorch otherwise starts with one thread.
int ConfigureThreads(int requested);

// Frees the calling thread's idle OpenMP thread team (omp_pause_resource_all,
// OpenMP 5.0; threads go, settings stay).
//
// Why: libgomp keeps a team for every thread that ever ran a parallel region
// and counts their threads. Once they outnumber the CPUs, every team stops
// spinning between parallel regions and sleeps on a futex instead, so each
// small parallel op pays a wake-up. On 2 CPUs the team left on the main
// thread by loading a model made the engine thread's batch-1 decode step 1.7x
// slower. Call it on a thread that did setup work before another thread takes
// over the tensor work. A later parallel region on this thread makes a new
// team.
void ReleaseThreadTeam();

// Keeps freed tensor memory (blocks up to 32 MiB) in the C heap for reuse
// instead of handing it back to the kernel; returns false if glibc refused.
// Call once at startup, before the tensor work.
//
// Why: glibc maps large blocks with mmap and unmaps them on free, and trims
// the heap top once more than twice the largest freed block lies free there.
// Either way a prefill's multi-megabyte temporaries (attention's
// [heads, chunk, context] scores) came back as fresh pages on every call,
// and page faults took a visible share of an MHA prefill (docs/benchmarks.md
// has the counts). Cost: the heap keeps its peak size (up to 256 MiB of free
// memory per malloc arena) rather than shrinking.
bool KeepFreedMemoryForReuse();

// Hands the C heap's free memory back to the system (malloc_trim): what
// loading left behind, which KeepFreedMemoryForReuse would otherwise keep.
// Loading a model frees as much as it keeps (the package's bytes, LibTorch's
// copy of every tensor); gigabytes at the public 1B shapes. Call once the
// models are loaded.
void ReturnFreedMemory();

}  // namespace attn
