// The arithmetic of RWKV-7's elementwise kernels on a GPU (state_kernels.h:
// Rwkv7Mix, Rwkv7Activations, Rwkv7HeadOutput) for one thread's channel or
// one lane of a warp, shared with their CPU check
// (tests/cuda_rwkv7_math_test.cc), which runs every thread and lane and
// checks them against the torch operations they replace. The token shift
// and the activations take the CPU kernels' arguments (model/kernels/
// kernels.h), pointed at the GPU's memory: one statement of each contract.
#pragma once

#include <math.h>  // expf, sqrtf, fmaxf in host and device code alike

#include <cstdint>

#include "model/cuda/state_kernels.h"
#include "model/cuda/step_math.h"
#include "model/kernels/kernels.h"

namespace attn::cuda {

ATTN_HOST_DEVICE inline float Logistic(float x) { return 1.f / (1.f + expf(-x)); }

// kernels::TokenShiftMix for channel i of token `token` (b * time + t):
// every mix's out_m = x + (x_previous - x) mu_m. `mu` holds the mixes'
// pointers by value (a kernel cannot read the host's array of them).
ATTN_HOST_DEVICE inline void MixChannel(const kernels::TokenShiftMixArgs& a, const Rwkv7Mixes& mu,
                                        int64_t token, int64_t i) {
  const int64_t c = a.channels, t = token % a.time, plane = a.batch * a.time * c;
  const float x = a.x[token * c + i];
  const float previous = t > 0 ? a.x[(token - 1) * c + i] : a.shift[(token / a.time) * c + i];
  for (int64_t m = 0; m < a.count; ++m) {
    a.out[m * plane + token * c + i] = x + (previous - x) * mu.mixes[m][i];
  }
}

// kernels::Rwkv7Activations for the channel at `at` (token * C + i): w,
// iclr, v (with first) and k in place, kk set to k kappa, the key before
// it changes, not yet normalised; returns kk's square, the channel's part
// of its head's squared norm.
ATTN_HOST_DEVICE inline float ActivateChannel(const kernels::Rwkv7ActivationsArgs& a, int64_t at) {
  const int64_t i = at % (a.heads * a.head_dim);
  a.w[at] = expf(-a.decay_scale * Logistic(a.decay_bias[i] + a.w[at]));
  const float iclr = Logistic(a.iclr_bias[i] + a.iclr[at]);
  a.iclr[at] = iclr;
  if (a.first != nullptr)
    a.v[at] += (a.first[at] - a.v[at]) * Logistic(a.value_bias[i] + a.gate[at]);
  const float scaled = a.k[at] * a.key_norm_scale[i];
  a.kk[at] = scaled;
  a.k[at] *= 1.f + (iclr - 1.f) * a.key_iclr_scale[i];
  return scaled * scaled;
}

// kk at `at` over its head's norm, given the head's summed squares.
ATTN_HOST_DEVICE inline void NormalizeKey(const kernels::Rwkv7ActivationsArgs& a, int64_t at,
                                          float squares) {
  a.kk[at] *= 1.f / fmaxf(sqrtf(squares), 1e-12f);
}

// Rwkv7HeadOutput, a warp per (output token, head) = `unit`, lane l over
// channels l, l + 32, ...: the lane's parts of the head's sum of o and of
// its bonus sum_j r_j k_j bonus_j.
struct HeadSums {
  float o = 0.f, bonus = 0.f;
};

// Where unit's channel j of an output row (o, r, out: [tokens, C]) and of
// a whole chunk's row (k, v: [batch, time, C], the last `tail` tokens the
// outputs') sit.
ATTN_HOST_DEVICE inline int64_t HeadOutputAt(const Rwkv7HeadOutputArgs& a, int64_t unit,
                                             int64_t j) {
  return unit * a.head_dim + j;  // unit = token * heads + head
}
ATTN_HOST_DEVICE inline int64_t HeadChunkAt(const Rwkv7HeadOutputArgs& a, int64_t unit, int64_t j) {
  const int64_t token = unit / a.heads, head = unit % a.heads;
  const int64_t b = token / a.tail, t = a.time - a.tail + token % a.tail;
  return ((b * a.time + t) * a.heads + head) * a.head_dim + j;
}

ATTN_HOST_DEVICE inline HeadSums HeadOutputSums(const Rwkv7HeadOutputArgs& a, int64_t unit,
                                                int lane) {
  HeadSums sums;
  const int64_t channel0 = (unit % a.heads) * a.head_dim;
  for (int64_t j = lane; j < a.head_dim; j += kWarp) {
    sums.o += a.o[HeadOutputAt(a, unit, j)];
    sums.bonus +=
        a.r[HeadOutputAt(a, unit, j)] * a.k[HeadChunkAt(a, unit, j)] * a.bonus[channel0 + j];
  }
  return sums;
}

// The lane's part of the head's squared deviations from `mean`.
ATTN_HOST_DEVICE inline float HeadOutputSquares(const Rwkv7HeadOutputArgs& a, int64_t unit,
                                                int lane, float mean) {
  float squares = 0.f;
  for (int64_t j = lane; j < a.head_dim; j += kWarp) {
    const float centered = a.o[HeadOutputAt(a, unit, j)] - mean;
    squares += centered * centered;
  }
  return squares;
}

// The lane's channels of out: o normalised over the head, times the gain,
// plus the bias, plus the bonus times v.
ATTN_HOST_DEVICE inline void HeadOutputWrite(const Rwkv7HeadOutputArgs& a, int64_t unit, int lane,
                                             float mean, float squares, float bonus) {
  const float scale = 1.f / sqrtf(squares / static_cast<float>(a.head_dim) + a.eps);
  const int64_t channel0 = (unit % a.heads) * a.head_dim;
  for (int64_t j = lane; j < a.head_dim; j += kWarp) {
    const int64_t at = HeadOutputAt(a, unit, j), c = channel0 + j;
    a.out[at] =
        (a.o[at] - mean) * scale * a.gain[c] + a.bias[c] + bonus * a.v[HeadChunkAt(a, unit, j)];
  }
}

}  // namespace attn::cuda
