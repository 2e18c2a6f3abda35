// The row-wise kernels outside the mixers, declared in model/kernels/kernels.h:
// RMSNorm, ScaleNorm, Mamba-2's gated norm and causal convolution, and the
// feed-forward GELU.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

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

ATTN_HOT void SiluMulSpan(int64_t n, float* gate, const float* up) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] * Sigmoid(gate[i]) * up[i];
}

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

// y * silu(z) into out, then each group normalised (kernels.h).
ATTN_HOT void GatedNormRow(int64_t d, int64_t groups, const float* y, const float* z,
                           const float* gain, float eps, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) out[i] = y[i] * z[i] * Sigmoid(z[i]);
  const int64_t width = d / groups;
  for (int64_t g = 0; g < groups; ++g) {
    float* part = out + g * width;
    const float mean_square = Dot(part, part, width) / static_cast<float>(width);
    const float scale = 1.0f / std::sqrt(mean_square + eps);
    const float* gains = gain + g * width;
#pragma omp simd
    for (int64_t i = 0; i < width; ++i) part[i] = gains[i] * (part[i] * scale);
  }
}

// Input p of row b of a causal convolution, p from -(L - 1): the window,
// then the chunk.
inline const float* ConvInput(const CausalConvArgs& a, int64_t b, int64_t p) {
  const int64_t held = a.width - 1;
  return p < 0 ? a.window + (b * held + held + p) * a.channels
               : a.in + (b * a.time + p) * a.in_stride;
}

// Token t of row b of a causal convolution (kernels.h, CausalConvArgs).
// kWidth > 0 fixes the width at compile time, so that the loop over the
// channels reads the weight's interleaved taps as vector loads; 0 (any
// width) adds one tap at a time over the channels.
template <int64_t kWidth>
ATTN_HOT void CausalConvToken(const CausalConvArgs& a, int64_t b, int64_t t) {
  float* out = a.out + (b * a.time + t) * a.channels;
  if constexpr (kWidth > 0) {
    const float* inputs[kWidth];
    for (int64_t j = 0; j < kWidth; ++j) inputs[j] = ConvInput(a, b, t - (kWidth - 1) + j);
#pragma omp simd
    for (int64_t i = 0; i < a.channels; ++i) {
      float sum = a.bias[i];
      for (int64_t j = 0; j < kWidth; ++j) sum += a.weight[i * kWidth + j] * inputs[j][i];
      out[i] = sum * Sigmoid(sum);
    }
  } else {
    std::copy(a.bias, a.bias + a.channels, out);
    for (int64_t j = 0; j < a.width; ++j) {
      const float* in = ConvInput(a, b, t - (a.width - 1) + j);
      for (int64_t i = 0; i < a.channels; ++i) out[i] += a.weight[i * a.width + j] * in[i];
    }
#pragma omp simd
    for (int64_t i = 0; i < a.channels; ++i) out[i] *= Sigmoid(out[i]);
  }
}

}  // namespace

void GatedRmsNormRows(int64_t rows, int64_t d, int64_t groups, const float* y, const float* z,
                      int64_t z_stride, const float* gain, float eps, float* out) {
  at::parallel_for(0, rows, GrainFor(4 * d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      GatedNormRow(d, groups, y + r * d, z + r * z_stride, gain, eps, out + r * d);
    }
  });
}

void CausalConvSilu(const CausalConvArgs& a) {
  const int64_t c = a.channels, held = a.width - 1;
  auto run = [&](auto width) {
    at::parallel_for(0, a.batch * a.time, GrainFor(c * a.width), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        CausalConvToken<decltype(width)::value>(a, i / a.time, i % a.time);
      }
    });
  };
  switch (a.width) {
    case 3:
      run(std::integral_constant<int64_t, 3>());
      break;
    case 4:
      run(std::integral_constant<int64_t, 4>());
      break;
    default:
      run(std::integral_constant<int64_t, 0>());
  }
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t j = 0; j < held; ++j) {
      const float* in = ConvInput(a, b, a.time - held + j);
      std::copy(in, in + c, a.window_out + (b * held + j) * c);
    }
  }
}

void GeluInPlace(int64_t n, float* x) {
  constexpr int64_t kBlock = 1024;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  at::parallel_for(0, blocks, GrainFor(8 * kBlock), [&](int64_t begin, int64_t end) {
    const int64_t first = begin * kBlock;
    GeluSpan(std::min(n, end * kBlock) - first, x + first);
  });
}

void SiluMulInPlace(int64_t n, float* gate, const float* up) {
  constexpr int64_t kBlock = 1024;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  at::parallel_for(0, blocks, GrainFor(8 * kBlock), [&](int64_t begin, int64_t end) {
    const int64_t first = begin * kBlock;
    SiluMulSpan(std::min(n, end * kBlock) - first, gate + first, up + first);
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
