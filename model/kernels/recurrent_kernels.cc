// The per-channel and per-head recurrences of RWKV-4 and Mamba-2
// (kernels.h: Rwkv4Wkv, Mamba2Scan).
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "model/kernels/kernel_common.h"
#include "model/kernels/kernels.h"

namespace attn::kernels {
namespace {

// Channels [begin, end) of row `row` over every token.
ATTN_HOT void Rwkv4Channels(const Rwkv4WkvArgs& a, int64_t row, int64_t begin, int64_t end) {
  const int64_t c = a.channels, outputs = a.time - a.first_output;
  float* num = a.num + row * c;
  float* den = a.den + row * c;
  float* max = a.max + row * c;
  for (int64_t t = 0; t < a.time; ++t) {
    const float* k = a.k + (row * a.time + t) * c;
    const float* v = a.v + (row * a.time + t) * c;
    if (t >= a.first_output) {
      float* out = a.out + (row * outputs + t - a.first_output) * c;
      for (int64_t i = begin; i < end; ++i) {
        const float bonus = a.first[i] + k[i];
        const float q = std::max(max[i], bonus);
        const float past = std::exp(max[i] - q), now = std::exp(bonus - q);
        out[i] = (past * num[i] + now * v[i]) / (past * den[i] + now);
      }
    }
    for (int64_t i = begin; i < end; ++i) {
      const float decayed = max[i] + a.decay[i];
      const float q = std::max(decayed, k[i]);
      const float past = std::exp(decayed - q), now = std::exp(k[i] - q);
      num[i] = past * num[i] + now * v[i];
      den[i] = past * den[i] + now;
      max[i] = q;
    }
  }
}

// softplus(x) = log(1 + e^x), as torch computes it: x itself above 20.
inline float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// One head of one row over every token.
ATTN_HOT void Mamba2OneHead(const Mamba2ScanArgs& a, int64_t row, int64_t h) {
  const int64_t p = a.head_dim, n = a.state_size, heads = a.heads;
  const int64_t group = h / (heads / a.groups), outputs = a.time - a.first_output;
  const int64_t x_stride = a.xbc_stride > 0 ? a.xbc_stride : heads * p;
  const int64_t bc_stride = a.xbc_stride > 0 ? a.xbc_stride : a.groups * n;
  const int64_t dt_stride = a.dt_stride > 0 ? a.dt_stride : heads;
  const float rate = -std::exp(a.a_log[h]);
  float* s = a.s + (SlotOf(a.slots, row) * heads + h) * p * n;
  for (int64_t t = 0; t < a.time; ++t) {
    const int64_t token = row * a.time + t;
    const float raw = a.dt[token * dt_stride + h];
    const float dt = a.dt_bias != nullptr ? Softplus(raw + a.dt_bias[h]) : raw;
    const float decay = std::exp(dt * rate);
    const float* x = a.x + token * x_stride + h * p;
    const float* b = a.b + token * bc_stride + group * n;
    const float* c = a.c + token * bc_stride + group * n;
    const bool emit = t >= a.first_output;
    float* out = emit ? a.out + ((row * outputs + t - a.first_output) * heads + h) * p : nullptr;
    for (int64_t i = 0; i < p; ++i) {
      float* state = s + i * n;
      const float input = dt * x[i];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) state[j] = state[j] * decay + input * b[j];
      if (emit) out[i] = Dot(state, c, n) + a.d[h] * x[i];
    }
  }
}

}  // namespace

void Rwkv4Wkv(const Rwkv4WkvArgs& a) {
  const int64_t blocks = (a.channels + kChannelBlock - 1) / kChannelBlock;
  at::parallel_for(
      0, a.batch * blocks, GrainFor(a.time * kChannelBlock * 16), [&](int64_t begin, int64_t end) {
        for (int64_t task = begin; task < end; ++task) {
          const int64_t first = (task % blocks) * kChannelBlock;
          Rwkv4Channels(a, task / blocks, first, std::min(a.channels, first + kChannelBlock));
        }
      });
}

void Mamba2Scan(const Mamba2ScanArgs& a) {
  const int64_t work = a.time * a.head_dim * a.state_size * 4;
  at::parallel_for(0, a.batch * a.heads, GrainFor(work), [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) Mamba2OneHead(a, task / a.heads, task % a.heads);
  });
}

}  // namespace attn::kernels
