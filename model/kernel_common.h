// What the CPU kernel files (kernels.cc, packed_gemm.cc) share. Only they
// include this.
#pragma once

#include <algorithm>
#include <cstdint>

// ATTN_HOT marks a hot loop to be compiled for AVX-512, AVX2+FMA and
// baseline x86-64; the loader picks the best the CPU has, so one binary
// serves any x86-64 machine.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ATTN_HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ATTN_HOT
#endif

// ATTN_INLINE marks the small helpers the hot loops call (exp, sigmoid, dot
// products). They must be inlined into each ATTN_HOT clone: called out of
// line they run the baseline x86-64 build, where std::floor is a library
// call, so the loop around them stays scalar (perf showed the AFT step
// spending 10% of a 64-row decode in an out-of-line exp).
#define ATTN_INLINE inline __attribute__((always_inline))

namespace attn::kernels {

// Below this many multiply-adds a task list runs on the calling thread: an
// OpenMP fork/join costs several microseconds, more than a small step.
inline constexpr int64_t kParallelWork = 1 << 15;

// The at::parallel_for grain for tasks of `work_per_task` multiply-adds.
inline int64_t GrainFor(int64_t work_per_task) {
  return std::max<int64_t>(1, kParallelWork / std::max<int64_t>(1, work_per_task));
}

}  // namespace attn::kernels
