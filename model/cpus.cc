#include "model/cpus.h"

#include <ATen/Parallel.h>
#include <malloc.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

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

}  // namespace attn
