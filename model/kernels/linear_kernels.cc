// Linear attention: the one-token step and the blockwise causal prefill
// (kernels.h).
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "model/kernels/head_tasks.h"
#include "model/kernels/kernel_common.h"
#include "model/kernels/kernels.h"
#include "model/kernels/register_tiles.h"

namespace attn::kernels {
namespace {

// phi of linear attention, written to `out`.
ATTN_INLINE void FeatureMap(const float* x, int64_t n, bool exp_feature, float* out) {
  if (exp_feature) {
    const float max = MaxOf(x, n);
    for (int64_t i = 0; i < n; ++i) out[i] = FastExp(x[i] - max);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.0f ? x[i] + 1.0f : FastExp(x[i]);
  }
}

// One head of one row (LinearAttentionStep). kDh > 0 fixes the head size at
// compile time, so that the output sums and v stay in vector registers
// while S streams past once; 0 reads it from `a`.
template <int64_t kDh>
ATTN_HOT void LinearOneHead(const LinearStepArgs& a, int64_t b, int64_t h,
                            std::vector<float>& scratch) {
  const int64_t dh = kDh > 0 ? kDh : a.head_dim;
  const int64_t slot = SlotOf(a.slots, b);
  const int64_t in = b * a.stride + h * dh;
  scratch.resize(3 * dh);
  float* phi_q = scratch.data();
  float* phi_k = phi_q + dh;
  float local_acc[kDh > 0 ? kDh : 1];
  float* acc = kDh > 0 ? local_acc : phi_k + dh;
  FeatureMap(a.q + in, dh, a.exp_feature, phi_q);
  FeatureMap(a.k + in, dh, a.exp_feature, phi_k);
  const float* v = a.v + in;
  float* s = a.s + (slot * a.heads + h) * dh * dh;
  float* z = a.z + (slot * a.heads + h) * dh;

  // One pass over S: update row i, then read it into the numerator.
  const float g = a.decay ? a.decay[h] : 1.0f;  // x * 1 is x: no change without decay
  std::fill(acc, acc + dh, 0.0f);
  float den = 0.0f;
  for (int64_t i = 0; i < dh; ++i) {
    float* s_row = s + i * dh;
    const float pk = phi_k[i];
    const float pq = phi_q[i];
#pragma omp simd
    for (int64_t j = 0; j < dh; ++j) {
      s_row[j] = g * s_row[j] + pk * v[j];
      acc[j] += pq * s_row[j];
    }
    z[i] = g * z[i] + pk;
    den += pq * z[i];
  }
  const float inv = 1.0f / (den + a.eps);
  float* out = a.out + (b * a.heads + h) * dh;
  for (int64_t j = 0; j < dh; ++j) out[j] = acc[j] * inv;
}

// Where one head's block lives while LinearPrefillOneHead works on it; all
// padded to whole vectors and whole tiles of rows, so that every product is
// whole register tiles (padding holds zeros or rows nobody reads).
struct LinearBlockScratch {
  int64_t dh, padded_dh, block, padded_block, rows;
  float *phi_q, *phi_kt, *v, *scores, *numerators, *s, *phi_k;
  LinearBlockScratch(std::vector<float>& scratch, int64_t head_dim, int64_t block_size)
      : dh(head_dim),
        padded_dh(RoundUp(head_dim, 16)),
        block(block_size),
        padded_block(RoundUp(block_size, 16)),
        // A tile of queries may start at any row of the block.
        rows(std::max(block_size, head_dim) + kTileRows) {
    const int64_t phi_q_size = rows * dh, phi_kt_size = rows * padded_block;
    const int64_t v_size = padded_block * padded_dh, scores_size = rows * padded_block;
    const int64_t numerators_size = rows * padded_dh, s_size = rows * padded_dh;
    const int64_t phi_k_size = dh;
    // Not cleared: each product reads only what this call writes, except
    // the padding of v and s, cleared below.
    scratch.resize(phi_q_size + phi_kt_size + v_size + scores_size + numerators_size + s_size +
                   phi_k_size);
    phi_q = scratch.data();             // [rows][dh]: query i's features
    phi_kt = phi_q + phi_q_size;        // [rows][padded_block]: feature r of key j
    v = phi_kt + phi_kt_size;           // [padded_block][padded_dh]
    scores = v + v_size;                // [rows][padded_block]: query i . key j
    numerators = scores + scores_size;  // [rows][padded_dh]
    s = numerators + numerators_size;   // [rows][padded_dh]: the state's s
    phi_k = s + s_size;                 // [dh]: one key's features, before transposing
    std::fill_n(v, v_size, 0.0f);
    std::fill_n(s, s_size, 0.0f);
  }
};

// One head of one row through all of a.time tokens (LinearAttentionPrefill),
// a block at a time, as small matrix products on register tiles:
//   scores  = phi(Q) phi(K)^T, zero above the diagonal
//   num     = phi(Q) S + scores V,   den = phi(Q) z + row sums of scores
//   S      += phi(K)^T V,            z  += column sums of phi(K)^T
// Written query by query, with the state row by row, the same sums ran at a
// fifth of the multiply-add peak: every key reloaded and restored a row of S.
template <int64_t kDh, bool kNarrow>
ATTN_HOT void LinearPrefillOneHead(const LinearPrefillArgs& a, int64_t b, int64_t h,
                                   std::vector<float>& scratch) {
  const int64_t dh = kDh > 0 ? kDh : a.head_dim;
  const int64_t slot = SlotOf(a.slots, b);
  const LinearBlockScratch m(scratch, dh, std::max<int64_t>(1, std::min(a.block, a.time)));
  float* s = a.s + (slot * a.heads + h) * dh * dh;
  float* z = a.z + (slot * a.heads + h) * dh;
  for (int64_t r = 0; r < dh; ++r) std::copy_n(s + r * dh, dh, m.s + r * m.padded_dh);
  // g^n for n = 0..block (linear-decay); empty without decay.
  std::vector<float> power;
  if (a.decay) {
    power.resize(m.block + 1, 1.0f);
    for (int64_t n = 1; n <= m.block; ++n) power[n] = power[n - 1] * a.decay[h];
  }
  auto at = [&](int64_t t) { return b * a.row_stride + t * a.token_stride + h * dh; };
  for (int64_t first = 0; first < a.time; first += m.block) {
    const int64_t len = std::min(m.block, a.time - first);
    // Queries of this block that get an output: i >= skip.
    const int64_t skip = std::clamp<int64_t>(a.first_output - first, 0, len);
    for (int64_t j = 0; j < len; ++j) {
      if (j >= skip) FeatureMap(a.q + at(first + j), dh, a.exp_feature, m.phi_q + j * dh);
      FeatureMap(a.k + at(first + j), dh, a.exp_feature, m.phi_k);
      for (int64_t r = 0; r < dh; ++r) m.phi_kt[r * m.padded_block + j] = m.phi_k[r];
      std::copy_n(a.v + at(first + j), dh, m.v + j * m.padded_dh);
    }
    for (int64_t i0 = skip; i0 < len; i0 += kTileRows) {
      // The tile's queries see keys 0..last-1: scores of later keys are
      // neither computed nor read.
      const int64_t last = std::min(len, i0 + kTileRows), width = RoundUp(last, 16);
      float* scores = m.scores + i0 * m.padded_block;
      float* num = m.numerators + i0 * m.padded_dh;
      for (int64_t r = 0; r < kTileRows; ++r) std::fill_n(scores + r * m.padded_block, width, 0.0f);
      std::fill_n(num, kTileRows * m.padded_dh, 0.0f);
      const float* phi_q = m.phi_q + i0 * dh;
      MulAddRows<kNarrow>(phi_q, dh, m.phi_kt, m.padded_block, dh, scores, m.padded_block, width);
      for (int64_t i = i0; i < last; ++i) {  // causal: no key after the query
        float* row = m.scores + i * m.padded_block;
        std::fill(row + i + 1, row + last, 0.0f);
        if (a.decay) {
          for (int64_t j = 0; j <= i; ++j) row[j] *= power[i - j];
        }
      }
      MulAddRows<kNarrow>(phi_q, dh, m.s, m.padded_dh, dh, num, m.padded_dh, m.padded_dh);
      if (a.decay) {  // the state is i + 1 tokens older for query i
        for (int64_t i = i0; i < last; ++i) {
          float* n = m.numerators + i * m.padded_dh;
          for (int64_t c = 0; c < dh; ++c) n[c] *= power[i + 1];
        }
      }
      MulAddRows<kNarrow>(scores, m.padded_block, m.v, m.padded_dh, last, num, m.padded_dh,
                          m.padded_dh);
      for (int64_t i = i0; i < last; ++i) {
        const float* row = m.scores + i * m.padded_block;
        float den = Dot(m.phi_q + i * dh, z, dh) * (a.decay ? power[i + 1] : 1.0f);
#pragma omp simd reduction(+ : den)
        for (int64_t j = 0; j <= i; ++j) den += row[j];
        float* out = a.out + (OutputToken(b, first + i, a.time, a.first_output) * a.heads + h) * dh;
        const float inv = 1.0f / (den + a.eps);
        const float* n = m.numerators + i * m.padded_dh;
        for (int64_t c = 0; c < dh; ++c) out[c] = n[c] * inv;
      }
    }
    // The block's keys join the state, each g^(len-1-j) as old as the state's
    // newest token, which ages by g^len.
    if (a.decay) {
      for (int64_t r = 0; r < dh; ++r) {
        float* row = m.phi_kt + r * m.padded_block;
        for (int64_t j = 0; j < len; ++j) row[j] *= power[len - 1 - j];
        float* s_row = m.s + r * m.padded_dh;
        for (int64_t c = 0; c < dh; ++c) s_row[c] *= power[len];
        z[r] *= power[len];
      }
    }
    for (int64_t r0 = 0; r0 < dh; r0 += kTileRows) {
      MulAddRows<kNarrow>(m.phi_kt + r0 * m.padded_block, m.padded_block, m.v, m.padded_dh, len,
                          m.s + r0 * m.padded_dh, m.padded_dh, m.padded_dh);
    }
    for (int64_t r = 0; r < dh; ++r) {
      const float* row = m.phi_kt + r * m.padded_block;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < len; ++j) sum += row[j];
      z[r] += sum;
    }
  }
  for (int64_t r = 0; r < dh; ++r) std::copy_n(m.s + r * m.padded_dh, dh, s + r * dh);
}

}  // namespace

void LinearAttentionStep(const LinearStepArgs& a) {
  ForEachRowAndHead(a, 2 * a.head_dim * a.head_dim,
                    [&](auto head_size, int64_t b, int64_t h, std::vector<float>& scratch) {
                      LinearOneHead<head_size()>(a, b, h, scratch);
                    });
}

void LinearAttentionPrefill(const LinearPrefillArgs& a, AttentionTiles tiles) {
  ForEachRowAndHead(
      a, a.time * a.head_dim * (2 * a.head_dim + a.block), tiles,
      [&](auto head_size, auto narrow, int64_t b, int64_t h, std::vector<float>& scratch) {
        LinearPrefillOneHead<head_size(), narrow()>(a, b, h, scratch);
      });
}

}  // namespace attn::kernels
