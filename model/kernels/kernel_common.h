// What the CPU kernel files of model/kernels/ share. Only they include this.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

// ATTN_HOT marks a hot loop to be compiled for AVX-512, AVX2+FMA and
// baseline x86-64; the loader picks the best the CPU has, so one binary
// serves any x86-64 machine. Not under ThreadSanitizer: the loader runs the
// clones' resolvers while relocating, before the TSan runtime is set up, and
// an instrumented resolver crashes there; TSan builds take the baseline.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
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

// a . b over n floats, summed in 16 lanes. The lanes are explicit: gcc
// left `omp simd reduction` scalar where the loop follows a store through
// another pointer (Mamba-2's scan spent 80% of its prefill in a scalar
// chain of dependent multiply-adds), while independent lanes vectorise as
// plain code at every ISA level.
ATTN_INLINE float Dot(const float* a, const float* b, int64_t n) {
  constexpr int64_t kLanes = 16;
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] += a[i + j] * b[i + j];
  }
  float sum = 0.0f;
  for (; i < n; ++i) sum += a[i] * b[i];
  for (int64_t j = 0; j < kLanes; ++j) sum += lanes[j];
  return sum;
}

// e^x for x already inside [-87, 88], within 2 ulp: range reduction
// x = n ln2 + r, |r| <= ln2/2, then a degree-6 polynomial for e^r (the
// classic Cephes expf coefficients) and 2^n from the exponent bits. Callers
// that know their argument's range (GELU's exp(-a^2) is never positive)
// clamp it themselves and skip FastExp's tests for the other ends.
ATTN_INLINE float ExpInRange(float x) {
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r -= n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return er * scale;
}

// exp(x) within 2 ulp for x in [-87, 88], 0 below, +inf above; free of
// branches and calls so that loops over it vectorise (std::exp does not).
ATTN_INLINE float FastExp(float x) {
  // Comparisons, not std::fmin/fmax: those stay library calls unless NaN is
  // ruled out, which kept every loop around this function scalar. A NaN fails
  // both tests and becomes -87, so the integer conversion in ExpInRange is
  // always defined; the NaN itself is returned at the end.
  float clamped = x > -87.0f ? x : -87.0f;
  clamped = clamped < 88.0f ? clamped : 88.0f;
  const float y = ExpInRange(clamped);
  const float in_range =
      x < -87.0f ? 0.0f : (x > 88.0f ? std::numeric_limits<float>::infinity() : y);
  return x != x ? x : in_range;
}

ATTN_INLINE float Sigmoid(float x) { return 1.0f / (1.0f + FastExp(-x)); }

// acc += f * x over n channels. Inlined into its callers' clones.
ATTN_INLINE void AddScaled(float f, const float* x, int64_t n, float* acc) {
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) acc[d] += f * x[d];
}

// Channels per task of the AFT kernels.
inline constexpr int64_t kChannelBlock = 64;

// The state row of batch element b: slots[b], or b without a slot list.
inline int64_t SlotOf(const int64_t* slots, int64_t b) { return slots ? slots[b] : b; }

// Where a prefill kernel writes token t of row b: out holds time -
// first_output tokens per row (first_output in kernels.h).
inline int64_t OutputToken(int64_t b, int64_t t, int64_t time, int64_t first_output) {
  return b * (time - first_output) + t - first_output;
}

// Vectors for the register-blocked loops: 16, 8 and 4 floats. Only ever
// locals of inlined code (never passed or returned, whose ABI would depend on
// the clone). aligned(4): loads and stores need no alignment.
typedef float Vec16 __attribute__((vector_size(64), aligned(4)));
typedef float Vec8 __attribute__((vector_size(32), aligned(4)));
typedef float Vec4 __attribute__((vector_size(16), aligned(4)));

// The largest x[i] that is not NaN; -inf if there is none (math_kernels.cc).
float MaxOf(const float* x, int64_t n);

}  // namespace attn::kernels
