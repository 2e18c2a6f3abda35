#include "util/cpus.h"

#include <ATen/Parallel.h>
#include <malloc.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace attn {
namespace {

std::optional<int> QuotaCpus(double quota, double period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  return std::max(1, static_cast<int>(std::ceil(quota / period)));
}

std::optional<int> CgroupCpus() {
  std::ifstream v2("/sys/fs/cgroup/cpu.max");
  std::string line;
  if (v2 && std::getline(v2, line)) return CpusFromCgroupV2(line);
  std::ifstream quota_file("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
  std::ifstream period_file("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  double quota = 0, period = 0;
  if (quota_file >> quota && period_file >> period) return QuotaCpus(quota, period);
  return std::nullopt;
}

}  // namespace

std::optional<int> CpusFromCgroupV2(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max") return std::nullopt;
  try {
    return QuotaCpus(std::stod(quota), period);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

int UsableCpus() {
  int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) cpus = std::max(1, CPU_COUNT(&mask));
  if (const auto quota = CgroupCpus()) cpus = std::min(cpus, *quota);
  return cpus;
}

std::vector<int> AllowedCpus() {
  std::vector<int> cpus;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &mask)) cpus.push_back(cpu);
  }
  return cpus;
}

absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text) {
  std::vector<int> cpus;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> ends = absl::StrSplit(part, absl::MaxSplits('-', 1));
    int first = 0, last = 0;
    if (!absl::SimpleAtoi(ends[0], &first) ||
        !absl::SimpleAtoi(ends.size() > 1 ? ends[1] : ends[0], &last) || first < 0 ||
        last < first || last >= CPU_SETSIZE) {
      return absl::InvalidArgumentError(absl::StrCat("\"", part, "\" in the CPU list \"", text,
                                                     "\" is not a CPU number or a range like 0-3"));
    }
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::vector<std::string> runs;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    runs.push_back(j == i ? absl::StrCat(cpus[i]) : absl::StrCat(cpus[i], "-", cpus[j]));
    i = j + 1;
  }
  return absl::StrJoin(runs, ",");
}

absl::Status PinCallingThread(const std::vector<int>& cpus) {
  if (cpus.empty()) return absl::InvalidArgumentError("no CPUs to run on");
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      return absl::InvalidArgumentError(absl::StrCat("CPU ", cpu, " does not exist"));
    }
    CPU_SET(cpu, &mask);
  }
  if (sched_setaffinity(0, sizeof(mask), &mask) == 0) return absl::OkStatus();
  const std::string message =
      absl::StrCat("cannot run on CPUs ", FormatCpuList(cpus), ": ", std::strerror(errno));
  return errno == EINVAL ? absl::InvalidArgumentError(message) : absl::InternalError(message);
}

int ConfigureThreads(int requested) {
  const int threads = requested > 0 ? requested : UsableCpus();
  at::set_num_threads(threads);
  return threads;
}

void ReleaseThreadTeam() { omp_pause_resource_all(omp_pause_soft); }

bool KeepFreedMemoryForReuse() {
  // 32 MiB is the largest mmap threshold glibc accepts on 64-bit systems.
  constexpr int kMmapThreshold = 32 << 20;
  constexpr int kTrimThreshold = 256 << 20;
  return mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 &&
         mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
}

void ReturnFreedMemory() { malloc_trim(0); }

}  // namespace attn
