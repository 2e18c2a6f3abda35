// RWKV-7's per-head state update (kernels.h, Rwkv7Update), its activations
// and the token shift's mixes.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/kernels/head_tasks.h"
#include "model/kernels/kernel_common.h"
#include "model/kernels/kernels.h"

namespace attn::kernels {
namespace {

// The epilogue (kernels.h) on one head's n outputs at `out`; r, k and v are
// the token's, at the head.
ATTN_INLINE void HeadEpilogue(const Rwkv7UpdateArgs& a, int64_t h, int64_t n, const float* r,
                              const float* k, const float* v, float* out) {
  const int64_t at = h * n;
  float sum = 0.0f, bonus = 0.0f;
#pragma omp simd reduction(+ : sum, bonus)
  for (int64_t i = 0; i < n; ++i) {
    sum += out[i];
    bonus += r[i] * k[i] * a.bonus[at + i];
  }
  const float mean = sum / static_cast<float>(n);
  float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
  for (int64_t i = 0; i < n; ++i) squares += (out[i] - mean) * (out[i] - mean);
  const float scale = 1.0f / std::sqrt(squares / static_cast<float>(n) + a.norm_eps);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    out[i] = (out[i] - mean) * scale * a.norm_gain[at + i] + a.norm_bias[at + i] + bonus * v[i];
  }
}

// One head of one row over every token of the chunk. kN > 0 fixes the head
// size at compile time, so that a row of S stays in vector registers while
// it is decayed, corrected and read; 0 reads it from `a`. Two passes over S
// per token: the first reads S kk (with the old S), the second updates each
// row and reads it into the output.
template <int64_t kN>
ATTN_HOT void Rwkv7OneHead(const Rwkv7UpdateArgs& a, int64_t b, int64_t h,
                           std::vector<float>& scratch) {
  const int64_t n = kN > 0 ? kN : a.head_dim;
  const int64_t channels = a.heads * n;
  scratch.resize(2 * n);
  float* removed = scratch.data();  // S kk, by value channel
  float* target = removed + n;      // a * kk, by key channel
  float* s = a.s + (SlotOf(a.slots, b) * a.heads + h) * n * n;
  const int64_t outputs = a.time - a.first_output;
  for (int64_t t = 0; t < a.time; ++t) {
    const int64_t in = (b * a.time + t) * channels + h * n;
    const float* w = a.w + in;
    const float* k = a.k + in;
    const float* v = a.v + in;
    const float* kk = a.kk + in;
    const float* iclr = a.a + in;
    for (int64_t i = 0; i < n; ++i) removed[i] = Dot(s + i * n, kk, n);
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) target[j] = kk[j] * iclr[j];
    const bool emit = t >= a.first_output;
    const int64_t out_at = (b * outputs + t - a.first_output) * channels + h * n;
    const float* r = emit ? a.r + out_at : nullptr;
    for (int64_t i = 0; i < n; ++i) {
      float* row = s + i * n;
      const float sa = removed[i];
      const float vi = v[i];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) row[j] = row[j] * w[j] - sa * target[j] + vi * k[j];
      if (emit) a.out[out_at + i] = Dot(row, r, n);
    }
    if (emit && a.norm_gain != nullptr) HeadEpilogue(a, h, n, r, k, v, a.out + out_at);
  }
}

// One token's activations (kernels.h, Rwkv7Activations) over its C channels
// at offset `at`.
ATTN_HOT void ActivateToken(const Rwkv7ActivationsArgs& a, int64_t at) {
  const int64_t c = a.heads * a.head_dim;
  float* w = a.w + at;
  float* v = a.v + at;
  float* iclr = a.iclr + at;
  float* k = a.k + at;
  float* kk = a.kk + at;
#pragma omp simd
  for (int64_t i = 0; i < c; ++i) {
    w[i] = FastExp(-a.decay_scale * Sigmoid(a.decay_bias[i] + w[i]));
    iclr[i] = Sigmoid(a.iclr_bias[i] + iclr[i]);
    kk[i] = k[i] * a.key_norm_scale[i];
  }
  if (a.first != nullptr) {
    const float* first = a.first + at;
    const float* gate = a.gate + at;
#pragma omp simd
    for (int64_t i = 0; i < c; ++i) {
      v[i] += (first[i] - v[i]) * Sigmoid(a.value_bias[i] + gate[i]);
    }
  }
  for (int64_t h = 0; h < a.heads; ++h) {
    float* head = kk + h * a.head_dim;
    const float norm = std::sqrt(Dot(head, head, a.head_dim));
    const float inverse = 1.0f / std::max(norm, 1e-12f);
#pragma omp simd
    for (int64_t i = 0; i < a.head_dim; ++i) head[i] *= inverse;
  }
#pragma omp simd
  for (int64_t i = 0; i < c; ++i) k[i] *= 1.0f + (iclr[i] - 1.0f) * a.key_iclr_scale[i];
}

// The mixes of row b's token t (kernels.h, TokenShiftMix).
ATTN_HOT void MixToken(const TokenShiftMixArgs& a, int64_t b, int64_t t) {
  const int64_t c = a.channels;
  const float* x = a.x + (b * a.time + t) * c;
  const float* previous = t > 0 ? x - c : a.shift + b * c;
  const int64_t plane = a.batch * a.time * c;
  for (int64_t m = 0; m < a.count; ++m) {
    const float* mu = a.mixes[m];
    float* out = a.out + m * plane + (b * a.time + t) * c;
#pragma omp simd
    for (int64_t i = 0; i < c; ++i) out[i] = x[i] + (previous[i] - x[i]) * mu[i];
  }
}

}  // namespace

void TokenShiftMix(const TokenShiftMixArgs& a) {
  at::parallel_for(0, a.batch * a.time, GrainFor(a.count * a.channels),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t i = begin; i < end; ++i) MixToken(a, i / a.time, i % a.time);
                   });
}

void Rwkv7Activations(const Rwkv7ActivationsArgs& a) {
  const int64_t c = a.heads * a.head_dim;
  at::parallel_for(0, a.tokens, GrainFor(32 * c), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) ActivateToken(a, t * c);
  });
}

void Rwkv7Update(const Rwkv7UpdateArgs& a) {
  const int64_t work = a.time * a.head_dim * a.head_dim * 4;
  ForEachRowAndHead(a, work, [&](auto head_size, int64_t b, int64_t h, std::vector<float>& s) {
    Rwkv7OneHead<decltype(head_size)::value>(a, b, h, s);
  });
}

}  // namespace attn::kernels
