// Vectorised reductions the kernels and the sampler share: exp, log-sum-exp,
// arg max, the largest value (kernels.h, kernel_common.h).
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "model/kernels/kernel_common.h"
#include "model/kernels/kernels.h"

namespace attn::kernels {
namespace {

ATTN_HOT float SumOfExpMinus(const float* x, int64_t n, float shift) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += FastExp(x[i] - shift);
  return sum;
}

}  // namespace

// The largest x[i] that is not NaN; -inf if there is none. Lanes of partial
// maxima: a plain max loop stays scalar (reordering it is only allowed under
// -ffinite-math-only), even under `omp simd reduction(max)`, where perf
// found it taking a fifth of the causal prefill.
ATTN_HOT float MaxOf(const float* x, int64_t n) {
  constexpr int64_t kLanes = 16;
  float lanes[kLanes];
  for (float& lane : lanes) lane = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] = x[i + j] > lanes[j] ? x[i + j] : lanes[j];
  }
  float max = -std::numeric_limits<float>::infinity();
  for (; i < n; ++i) max = x[i] > max ? x[i] : max;
  for (const float lane : lanes) max = lane > max ? lane : max;
  return max;
}

float Exp(float x) { return FastExp(x); }

int64_t ArgMax(const float* x, int64_t n) {
  const float max = MaxOf(x, n);
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] == max) return i;
  }
  return 0;
}

float LogSumExp(const float* x, int64_t n) {
  // MaxOf skips NaN; a NaN then makes the sum NaN, unless the max is infinite.
  const float max = MaxOf(x, n);
  if (std::isinf(max)) {  // -inf: nothing; +inf: dominates
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(x[i])) return x[i];
    }
    return max;
  }
  return max + std::log(SumOfExpMinus(x, n, max));
}

void AdvanceLengths(int64_t batch, const int64_t* slots, int64_t* lengths) {
  for (int64_t b = 0; b < batch; ++b) ++lengths[SlotOf(slots, b)];
}

}  // namespace attn::kernels
