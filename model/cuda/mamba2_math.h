// The arithmetic of Mamba-2's elementwise kernels on a GPU (state_kernels.h:
// CausalConvSilu, GatedRmsNorm) for one thread's channel, shared with their
// CPU check (tests/cuda_mamba2_math_test.cc), which runs every thread and
// checks them against the torch operations they replace. The convolution
// takes the CPU kernel's arguments (model/kernels/kernels.h,
// CausalConvArgs), pointed at the GPU's memory.
#pragma once

#include <math.h>  // expf, sqrtf in host and device code alike

#include <cstdint>

#include "model/cuda/state_kernels.h"
#include "model/cuda/step_math.h"
#include "model/kernels/kernels.h"

namespace attn::cuda {

// Row b's input at position `at` of the chunk, channel i: the chunk's own
// from 0 on, the row's window of its last width - 1 inputs before.
ATTN_HOST_DEVICE inline float ConvInputAt(const kernels::CausalConvArgs& a, int64_t b, int64_t at,
                                          int64_t i) {
  const int64_t held = a.width - 1;
  if (at >= 0) return a.in[(b * a.time + at) * a.in_stride + i];
  return a.window[(b * held + held + at) * a.channels + i];
}

// The convolution's thread for `unit` = b * (time + width - 1) + p and
// channel i: for p < time, out[b, p, i] = silu(bias + sum_j weight[i, j]
// input[p - width + 1 + j]); past it, the row's new window, its inputs
// time - width + 1 .. time - 1.
ATTN_HOST_DEVICE inline void ConvChannel(const kernels::CausalConvArgs& a, int64_t unit,
                                         int64_t i) {
  const int64_t held = a.width - 1, span = a.time + held;
  const int64_t b = unit / span, p = unit % span;
  if (p >= a.time) {
    const int64_t j = p - a.time;
    a.window_out[(b * held + j) * a.channels + i] = ConvInputAt(a, b, a.time - held + j, i);
    return;
  }
  float sum = a.bias[i];
  for (int64_t j = 0; j < a.width; ++j) {
    sum += a.weight[i * a.width + j] * ConvInputAt(a, b, p - held + j, i);
  }
  a.out[(b * a.time + p) * a.channels + i] = sum / (1.f + expf(-sum));
}

// y * silu(z) for the gated norm's channel i of row `row`.
ATTN_HOST_DEVICE inline float GatedValue(const GatedRmsNormArgs& a, int64_t row, int64_t i) {
  const float z = a.z[row * a.z_stride + i];
  return a.y[row * a.d + i] * z / (1.f + expf(-z));
}

// The gated norm's output at channel i of row `row`, given the summed
// squares of its group's gated values.
ATTN_HOST_DEVICE inline void GatedNormWrite(const GatedRmsNormArgs& a, int64_t row, int64_t i,
                                            float squares) {
  const float mean = squares / static_cast<float>(a.d / a.groups);
  a.out[row * a.d + i] = a.gain[i] * GatedValue(a, row, i) / sqrtf(mean + a.eps);
}

}  // namespace attn::cuda
