// The row-wise kernels outside the mixers, declared in model/kernels/kernels.h:
// RMSNorm, ScaleNorm and the feed-forward GELU.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

#include "model/kernels/kernel_common.h"
#include "model/kernels/kernels.h"

namespace attn::kernels {

namespace {

ATTN_HOT void ScaleRow(const float* in, const float* gain, float scale, int64_t d, float* out) {
  if (gain == nullptr) {
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) out[i] = in[i] * scale;
    return;
  }
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) out[i] = gain[i] * (in[i] * scale);
}

ATTN_HOT float SquaredNorm(const float* in, int64_t d) { return Dot(in, in, d); }

ATTN_HOT void GeluSpan(int64_t n, float* x) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float a = (v < 0.0f ? -v : v) * kInvSqrt2;
    // erfc(a) = poly(t) exp(-a^2), t = 1 / (1 + p a), for a >= 0.
    const float t = 1.0f / (1.0f + 0.3275911f * a);
    float poly = 1.061405429f;
    poly = poly * t - 1.453152027f;
    poly = poly * t + 1.421413741f;
    poly = poly * t - 0.284496736f;
    poly = poly * t + 0.254829592f;
    // exp(-a^2) is never above 1, so only the lower end needs clamping (a
    // NaN input stays NaN through v below). Without FastExp's tests for the
    // upper end and for NaN, GELU takes 0.73 of the time, same results.
    const float minus_a2 = -a * a;
    const float exp_minus_a2 =
        minus_a2 < -87.0f ? 0.0f : ExpInRange(minus_a2 > -87.0f ? minus_a2 : -87.0f);
    const float erfc = poly * t * exp_minus_a2;
    // 1 + erf(v / sqrt(2)) is 2 - erfc(a) for v >= 0 and erfc(a) below.
    x[i] = 0.5f * v * (v < 0.0f ? erfc : 2.0f - erfc);
  }
}

}  // namespace

void GeluInPlace(int64_t n, float* x) {
  constexpr int64_t kBlock = 1024;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  at::parallel_for(0, blocks, GrainFor(8 * kBlock), [&](int64_t begin, int64_t end) {
    const int64_t first = begin * kBlock;
    GeluSpan(std::min(n, end * kBlock) - first, x + first);
  });
}

void RmsNormRows(int64_t rows, int64_t d, const float* x, const float* gain, float eps,
                 float* out) {
  at::parallel_for(0, rows, GrainFor(2 * d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* in = x + r * d;
      const float mean_square = SquaredNorm(in, d) / static_cast<float>(d);
      ScaleRow(in, gain, 1.0f / std::sqrt(mean_square + eps), d, out + r * d);
    }
  });
}

void ScaleNormRows(int64_t rows, int64_t d, const float* x, float gain, float eps, float* out) {
  at::parallel_for(0, rows, GrainFor(2 * d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* in = x + r * d;
      ScaleRow(in, nullptr, gain / std::max(std::sqrt(SquaredNorm(in, d)), eps), d, out + r * d);
    }
  });
}

}  // namespace attn::kernels
