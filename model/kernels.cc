#include "model/kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "model/kernel_common.h"

// The hot per-row functions are ATTN_HOT (model/kernel_common.h). The
// reductions that may be reordered to vectorise say so with `omp simd
// reduction`; elsewhere float arithmetic keeps its order. Loops over rows and
// heads fork through at::parallel_for.

namespace attn::kernels {
namespace {

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
  std::fill(acc, acc + dh, 0.0f);
  float den = 0.0f;
  for (int64_t i = 0; i < dh; ++i) {
    float* s_row = s + i * dh;
    const float pk = phi_k[i];
    const float pq = phi_q[i];
#pragma omp simd
    for (int64_t j = 0; j < dh; ++j) {
      s_row[j] += pk * v[j];
      acc[j] += pq * s_row[j];
    }
    z[i] += pk;
    den += pq * z[i];
  }
  const float inv = 1.0f / (den + a.eps);
  float* out = a.out + (b * a.heads + h) * dh;
  for (int64_t j = 0; j < dh; ++j) out[j] = acc[j] * inv;
}

// Runs one_head(head_size, b, h, scratch) for every row b and head h, split
// over the intra-op threads by `work_per_head` multiply-adds, with one scratch
// vector per thread. head_size is std::integral_constant<int64_t, N>: N is
// a.head_dim when the kernels have a compiled-in version for it (32, 40, 64),
// else 0 (read it at run time).
template <typename Args, typename OneHead>
void ForEachRowAndHead(const Args& a, int64_t work_per_head, OneHead&& one_head) {
  auto run = [&](auto head_size) {
    at::parallel_for(0, a.batch * a.heads, GrainFor(work_per_head),
                     [&](int64_t begin, int64_t end) {
                       std::vector<float> scratch;
                       for (int64_t task = begin; task < end; ++task) {
                         one_head(head_size, task / a.heads, task % a.heads, scratch);
                       }
                     });
  };
  switch (a.head_dim) {
    case 32:
      return run(std::integral_constant<int64_t, 32>());
    case 40:
      return run(std::integral_constant<int64_t, 40>());
    case 64:
      return run(std::integral_constant<int64_t, 64>());
    default:
      return run(std::integral_constant<int64_t, 0>());
  }
}

// Scores per vector of the score loop: one AVX-512 register.
constexpr int64_t kScoreLanes = 16;

// Vectors for the register-blocked loops below: 16, 8 and 4 floats. Only ever
// locals of inlined code (never passed or returned, whose ABI would depend on
// the clone). aligned(4): loads and stores need no alignment.
typedef float Vec16 __attribute__((vector_size(64), aligned(4)));
typedef float Vec8 __attribute__((vector_size(32), aligned(4)));
typedef float Vec4 __attribute__((vector_size(16), aligned(4)));

// out[i] = q . k_i for the four rows k_0..k_3 of kDh floats (kDh % 8 == 0),
// each row's sum in its own registers; the four are then folded together,
// three shuffles and adds in all, instead of one serial horizontal sum each.
template <int64_t kDh>
ATTN_INLINE void DotsOfFour(const float* q, const float* k, float* out) {
  static_assert(kDh > 0 && kDh % 8 == 0, "whole vectors only");
  constexpr int kFull = kDh / 16;
  constexpr bool kHalf = kDh % 16 != 0;
  Vec8 folded[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const float* row = k + i * kDh;
    Vec16 sum = {};
#pragma GCC unroll 4
    for (int f = 0; f < kFull; ++f) {
      Vec16 x, y;
      std::memcpy(&x, q + 16 * f, sizeof(x));
      std::memcpy(&y, row + 16 * f, sizeof(y));
      sum += x * y;
    }
    Vec8 half = {};
    if (kHalf) {
      Vec8 x, y;
      std::memcpy(&x, q + 16 * kFull, sizeof(x));
      std::memcpy(&y, row + 16 * kFull, sizeof(y));
      half = x * y;
    }
    folded[i] = __builtin_shufflevector(sum, sum, 0, 1, 2, 3, 4, 5, 6, 7) +
                __builtin_shufflevector(sum, sum, 8, 9, 10, 11, 12, 13, 14, 15) + half;
  }
  // [a b] -> per 4-lane half: a[0..3] + a[4..7], b[0..3] + b[4..7].
  const Vec8 ab = __builtin_shufflevector(folded[0], folded[1], 0, 1, 2, 3, 8, 9, 10, 11) +
                  __builtin_shufflevector(folded[0], folded[1], 4, 5, 6, 7, 12, 13, 14, 15);
  const Vec8 cd = __builtin_shufflevector(folded[2], folded[3], 0, 1, 2, 3, 8, 9, 10, 11) +
                  __builtin_shufflevector(folded[2], folded[3], 4, 5, 6, 7, 12, 13, 14, 15);
  // Pairs: [a0+a2, a1+a3, b.., b.., c.., c.., d.., d..].
  const Vec8 pairs = __builtin_shufflevector(ab, cd, 0, 1, 4, 5, 8, 9, 12, 13) +
                     __builtin_shufflevector(ab, cd, 2, 3, 6, 7, 10, 11, 14, 15);
  const Vec4 sums = __builtin_shufflevector(pairs, pairs, 0, 2, 4, 6) +
                    __builtin_shufflevector(pairs, pairs, 1, 3, 5, 7);
  std::memcpy(out, &sums, sizeof(sums));
}

// The causal prefill works on tiles of kQueryTile queries. Its score loop
// takes kScoreTile of them by kKeyGroup keys at a time: 16 vector
// accumulators, each key vector loaded once for the four queries, each
// query's q[r] broadcast once for all the keys. (Six queries, 24
// accumulators, ran slower.)
constexpr int64_t kQueryTile = 8;
constexpr int64_t kScoreTile = 4;
constexpr int64_t kKeyGroup = 4 * kScoreLanes;

// The largest lane of x (whose lanes are never NaN).
ATTN_INLINE float LargestLane(const Vec16& x) {
  const Vec8 a = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7);
  const Vec8 b = __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
  const Vec8 m8 = a > b ? a : b;
  const Vec4 c = __builtin_shufflevector(m8, m8, 0, 1, 2, 3);
  const Vec4 d = __builtin_shufflevector(m8, m8, 4, 5, 6, 7);
  const Vec4 m4 = c > d ? c : d;
  float largest = m4[0];
  for (int l = 1; l < 4; ++l) largest = m4[l] > largest ? m4[l] : largest;
  return largest;
}

// scores[i][j0 + l] = q_i . key_{j0 + l} * scale - slope * (position_i -
// j0 - l) for the tile's queries i and l < kKeyGroup, and -inf for keys after
// position_i: the causal mask, which the softmax's exponent turns into 0.
// Keys stored transposed in kt ([dh][padded]), score rows `padded` apart.
// Each query's lanes of running maxima, max[i], take in its scores (NaN
// never wins), so that the softmax needs no pass of its own for the maximum.
ATTN_INLINE void ScoreTile(const float* const* q, const int64_t* position, const float* kt,
                           int64_t padded, int64_t dh, int64_t j0, float scale, float slope,
                           float* scores, Vec16* max) {
  Vec16 sum[kScoreTile][4] = {};
  for (int64_t r = 0; r < dh; ++r) {
    const float* column = kt + r * padded + j0;
    Vec16 keys[4];  // loaded one by one: copied whole, the array went through the stack
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) std::memcpy(&keys[g], column + g * kScoreLanes, sizeof(keys[g]));
#pragma GCC unroll 4
    for (int i = 0; i < kScoreTile; ++i) {
      const float qr = q[i][r];
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) sum[i][g] += qr * keys[g];
    }
  }
  Vec16 lane;
  for (int l = 0; l < kScoreLanes; ++l) lane[l] = static_cast<float>(l);
  const Vec16 masked = Vec16{} - std::numeric_limits<float>::infinity();
  for (int i = 0; i < kScoreTile; ++i) {
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const float first = static_cast<float>(position[i] - j0 - g * kScoreLanes);
      const Vec16 distance = first - lane;
      Vec16 biased = sum[i][g] * scale - slope * distance;
      biased = distance < 0.0f ? masked : biased;
      max[i] = biased > max[i] ? biased : max[i];
      std::memcpy(scores + i * padded + j0 + g * kScoreLanes, &biased, sizeof(biased));
    }
  }
}

// acc[0..kDh) = sum_j p[j] v[j], j = 0..count-1, rows of v kDh floats apart.
// The sums stay in registers: kDh / 16 vectors and an 8-float half, twice
// (even and odd keys), so that consecutive keys do not wait on each other.
template <int64_t kDh>
ATTN_INLINE void WeightedSumOfRows(const float* p, const float* v, int64_t count, float* acc) {
  static_assert(kDh > 0 && kDh % 8 == 0, "whole vectors only");
  constexpr int kFull = kDh / 16;
  constexpr bool kHalf = kDh % 16 != 0;
  Vec16 even[kFull > 0 ? kFull : 1] = {}, odd[kFull > 0 ? kFull : 1] = {};
  Vec8 even_half = {}, odd_half = {};
  int64_t j = 0;
  for (; j + 1 < count; j += 2) {
    const float* row = v + j * kDh;
#pragma GCC unroll 4
    for (int f = 0; f < kFull; ++f) {
      Vec16 x, y;
      std::memcpy(&x, row + 16 * f, sizeof(x));
      std::memcpy(&y, row + kDh + 16 * f, sizeof(y));
      even[f] += p[j] * x;
      odd[f] += p[j + 1] * y;
    }
    if (kHalf) {
      Vec8 x, y;
      std::memcpy(&x, row + 16 * kFull, sizeof(x));
      std::memcpy(&y, row + kDh + 16 * kFull, sizeof(y));
      even_half += p[j] * x;
      odd_half += p[j + 1] * y;
    }
  }
  if (j < count) {
    const float* row = v + j * kDh;
#pragma GCC unroll 4
    for (int f = 0; f < kFull; ++f) {
      Vec16 x;
      std::memcpy(&x, row + 16 * f, sizeof(x));
      even[f] += p[j] * x;
    }
    if (kHalf) {
      Vec8 x;
      std::memcpy(&x, row + 16 * kFull, sizeof(x));
      even_half += p[j] * x;
    }
  }
  for (int f = 0; f < kFull; ++f) {
    const Vec16 total = even[f] + odd[f];
    std::memcpy(acc + 16 * f, &total, sizeof(total));
  }
  if (kHalf) {
    const Vec8 total = even_half + odd_half;
    std::memcpy(acc + 16 * kFull, &total, sizeof(total));
  }
}

// scores[j] = exp(scores[j] - max) over the first `count` scores; returns
// their sum, the softmax's denominator.
ATTN_INLINE float ExpShifted(float* scores, int64_t count, float max) {
  float total = 0.0f;
#pragma omp simd reduction(+ : total)
  for (int64_t j = 0; j < count; ++j) {
    scores[j] = FastExp(scores[j] - max);
    total += scores[j];
  }
  return total;
}

// out = sum_j softmax(scores)_j v_j over the first `count` scores (rows of v
// dh floats apart), whose largest is `max`; scores are overwritten with
// exp(score - max), acc is dh floats of scratch. Shared by the decode step
// and the causal prefill.
template <int64_t kDh>
ATTN_INLINE void SoftmaxWeightedSum(float* scores, int64_t count, float max, const float* v,
                                    int64_t dh, float* acc, float* out) {
  const float total = ExpShifted(scores, count, max);
  if constexpr (kDh > 0 && kDh % 8 == 0) {
    WeightedSumOfRows<kDh>(scores, v, count, acc);
  } else {
    std::fill(acc, acc + dh, 0.0f);
    for (int64_t j = 0; j < count; ++j) AddScaled(scores[j], v + j * dh, dh, acc);
  }
  const float inv_total = 1.0f / total;
  for (int64_t i = 0; i < dh; ++i) out[i] = acc[i] * inv_total;
}

// Queries per pass of TileWeightedSum at head size kDh: as many as keep
// their sums in about 24 of AVX-512's 32 registers.
template <int64_t kDh>
constexpr int64_t kWeightedRows = kDh <= 48 ? 8 : 4;

// acc[i][0..kDh) = sum_j p[i * stride + j] v_j for kRows queries i of a
// prefill tile, j = 0..count-1. Each row of v is loaded once for all of
// them: one query at a time (WeightedSumOfRows) the sum made one vector
// load per multiply-add and read the whole value cache once per query.
template <int64_t kDh, int64_t kRows>
ATTN_INLINE void TileWeightedSum(const float* p, int64_t stride, const float* v, int64_t count,
                                 float* acc) {
  static_assert(kDh > 0 && kDh % 8 == 0, "whole vectors only");
  constexpr int kFull = kDh / 16;
  constexpr bool kHalf = kDh % 16 != 0;
  Vec16 full[kRows][kFull > 0 ? kFull : 1] = {};
  Vec8 half[kRows] = {};
  for (int64_t j = 0; j < count; ++j) {
    const float* row = v + j * kDh;
    Vec16 x[kFull > 0 ? kFull : 1];
    Vec8 y = {};
#pragma GCC unroll 4
    for (int f = 0; f < kFull; ++f) std::memcpy(&x[f], row + 16 * f, sizeof(x[f]));
    if (kHalf) std::memcpy(&y, row + 16 * kFull, sizeof(y));
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      const float weight = p[i * stride + j];
#pragma GCC unroll 4
      for (int f = 0; f < kFull; ++f) full[i][f] += weight * x[f];
      if (kHalf) half[i] += weight * y;
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 4
    for (int f = 0; f < kFull; ++f) std::memcpy(acc + i * kDh + 16 * f, &full[i][f], sizeof(Vec16));
    if (kHalf) std::memcpy(acc + i * kDh + 16 * kFull, &half[i], sizeof(half[i]));
  }
}

// One head of one row (CachedAttentionStep). kDh > 0 fixes the head size at
// compile time: the dot products unroll, and the weighted sum of values stays
// in registers instead of going through out[] once per key.
template <int64_t kDh>
ATTN_HOT void AttendOneHead(const CachedAttentionArgs& a, int64_t b, int64_t h,
                            std::vector<float>& scratch) {
  const int64_t dh = kDh > 0 ? kDh : a.head_dim;
  const int64_t slot = SlotOf(a.slots, b);
  const int64_t length = a.lengths[slot];
  const int64_t row = (slot * a.heads + h) * a.capacity * dh;
  const float* keys = a.k_cache + row;
  const float* values = a.v_cache + row;
  const float* q = a.q + b * a.q_stride + h * dh;
  const float slope = a.log_slopes ? std::exp(a.log_slopes[h]) : 0.0f;

  scratch.resize(length + 1 + 3 * dh);
  float* scores = scratch.data();
  float* qc = scores + length + 1;
  float* qp = qc + dh;
  float* acc = qp + dh;
  for (int64_t i = 0; i < dh; ++i) {
    qc[i] = q[i] + (a.content_bias ? a.content_bias[h * dh + i] : 0.0f);
    qp[i] = a.r ? q[i] + a.position_bias[h * dh + i] : 0.0f;
  }
  int64_t first = 0;
  if constexpr (kDh > 0 && kDh % 8 == 0) {
    if (!a.r) {
      for (; first + 4 <= length + 1; first += 4) {
        // The values are read after the softmax: fetch them meanwhile.
        for (int64_t line = 0; line < 4 * kDh; line += 16)
          __builtin_prefetch(values + first * dh + line);
        DotsOfFour<kDh>(qc, keys + first * dh, scores + first);
      }
    }
  }
  for (int64_t j = first; j <= length; ++j) {
    scores[j] = Dot(qc, keys + j * dh, dh);
    if (a.r) scores[j] += Dot(qp, a.r + (h * a.capacity + length - j) * dh, dh);
  }
#pragma omp simd
  for (int64_t j = 0; j <= length; ++j) {
    scores[j] = scores[j] * a.scale - slope * static_cast<float>(length - j);
  }
  SoftmaxWeightedSum<kDh>(scores, length + 1, MaxOf(scores, length + 1), values, dh, acc,
                          a.out + (b * a.heads + h) * dh);
}

// kt[r * padded + j] = k[j * dh + r] for the first `keys` rows of k, a
// block of kScoreLanes keys at a time: key by key, each of the dh stores went
// to its own cache line `padded` floats away (perf: a tenth of the prefill
// kernel); per block the loads stay in one small patch of k and each run of
// stores fills whole lines.
ATTN_INLINE void TransposeKeys(const float* k, int64_t keys, int64_t dh, int64_t padded,
                               float* kt) {
  int64_t j0 = 0;
  for (; j0 + kScoreLanes <= keys; j0 += kScoreLanes) {
    for (int64_t r = 0; r < dh; ++r) {
      float* column = kt + r * padded + j0;
#pragma GCC unroll 16
      for (int64_t l = 0; l < kScoreLanes; ++l) column[l] = k[(j0 + l) * dh + r];
    }
  }
  for (int64_t j = j0; j < keys; ++j) {
    for (int64_t r = 0; r < dh; ++r) kt[r * padded + j] = k[j * dh + r];
  }
}

// The softmax-weighted sums of a full tile of prefill queries: each query's
// scores (rows `stride` apart, masked by ScoreTile past its position)
// become exp(score - max[i]) up to the tile's last position, so that the
// tile shares one pass over the values (TileWeightedSum). Query i's output
// goes to out + i * out_stride; acc is kQueryTile * kDh floats of scratch.
template <int64_t kDh>
ATTN_INLINE void SoftmaxTile(float* scores, int64_t stride, const int64_t* position,
                             const float* max, const float* v, float* acc, float* out,
                             int64_t out_stride) {
  constexpr int64_t kRows = kWeightedRows<kDh>;
  float inv_total[kQueryTile];
  for (int64_t i0 = 0; i0 < kQueryTile; i0 += kRows) {
    const int64_t count = position[i0 + kRows - 1] + 1;
    for (int64_t i = i0; i < i0 + kRows; ++i) {
      inv_total[i] = 1.0f / ExpShifted(scores + i * stride, count, max[i]);
    }
    TileWeightedSum<kDh, kRows>(scores + i0 * stride, stride, v, count, acc + i0 * kDh);
  }
  for (int i = 0; i < kQueryTile; ++i) {
    for (int64_t d = 0; d < kDh; ++d) out[i * out_stride + d] = acc[i * kDh + d] * inv_total[i];
  }
}

// One head of one row through a.time queries (CausalAttentionPrefill). The
// row's keys are first copied transposed, [Dh][keys], so that scores
// accumulate along the keys in vector lanes (ScoreTile); kDh > 0 fixes the
// head size so that the weighted sum of values stays in registers. Scores
// are computed up to the tile's last position only.
template <int64_t kDh>
ATTN_HOT void CausalPrefillOneHead(const CausalPrefillArgs& a, int64_t b, int64_t h,
                                   std::vector<float>& scratch) {
  const int64_t dh = kDh > 0 ? kDh : a.head_dim;
  // Queries that share one pass over the values (SoftmaxTile), or one
  // score tile's when each query takes its own pass.
  constexpr int64_t kSharedRows = kDh > 0 && kDh % 8 == 0 ? kWeightedRows<kDh> : kScoreTile;
  const int64_t keys = a.start + a.time;
  // Padded to whole key groups: the score loop reads and writes them whole.
  const int64_t padded = (keys + kKeyGroup - 1) / kKeyGroup * kKeyGroup;
  scratch.assign(dh * padded + kQueryTile * padded + kQueryTile * dh, 0.0f);
  float* kt = scratch.data();                 // [Dh][padded]
  float* scores = kt + dh * padded;           // [kQueryTile][padded]
  float* acc = scores + kQueryTile * padded;  // [kQueryTile][Dh]
  const int64_t row = (SlotOf(a.slots, b) * a.heads + h) * a.capacity * dh;
  const float* k = a.k_cache + row;
  const float* v = a.v_cache + row;
  TransposeKeys(k, keys, dh, padded, kt);
  const float slope = a.log_slopes ? std::exp(a.log_slopes[h]) : 0.0f;
  for (int64_t t0 = a.first_output; t0 < a.time; t0 += kQueryTile) {
    const int64_t count = std::min(kQueryTile, a.time - t0);
    const float* q[kQueryTile];
    int64_t position[kQueryTile];
    for (int64_t i = 0; i < kQueryTile; ++i) {  // a short tile repeats its last query
      const int64_t t = t0 + std::min(i, count - 1);
      q[i] = a.q + b * a.row_stride + t * a.token_stride + h * dh;
      position[i] = a.start + t;
    }
    Vec16 lanes_max[kQueryTile];
    for (Vec16& lanes : lanes_max) lanes = Vec16{} - std::numeric_limits<float>::infinity();
    for (int64_t i0 = 0; i0 < kQueryTile; i0 += kScoreTile) {
      // Up to the last key any query of this pass over the values reads.
      const int64_t last = position[(i0 / kSharedRows + 1) * kSharedRows - 1];
      for (int64_t j0 = 0; j0 <= last; j0 += kKeyGroup) {
        ScoreTile(q + i0, position + i0, kt, padded, dh, j0, a.scale, slope, scores + i0 * padded,
                  lanes_max + i0);
      }
    }
    float* out = a.out + (OutputToken(b, t0, a.time, a.first_output) * a.heads + h) * dh;
    const int64_t out_stride = a.heads * dh;  // between consecutive queries
    float max[kQueryTile];
    for (int64_t i = 0; i < kQueryTile; ++i) max[i] = LargestLane(lanes_max[i]);
    if constexpr (kDh > 0 && kDh % 8 == 0) {
      if (count == kQueryTile) {
        SoftmaxTile<kDh>(scores, padded, position, max, v, acc, out, out_stride);
        continue;
      }
    }
    for (int64_t i = 0; i < count; ++i) {
      SoftmaxWeightedSum<kDh>(scores + i * padded, position[i] + 1, max[i], v, dh, acc,
                              out + i * out_stride);
    }
  }
}

// Rows per register tile of MulAddRows: 6 rows x 4 vectors = 24
// accumulators, leaving AVX-512's 32 registers room for a row of B and a
// broadcast.
constexpr int64_t kTileRows = 6;

// Rounds n up to a multiple of m.
inline int64_t RoundUp(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// C[kTileRows x 16V] += A[kTileRows x k] B[k x 16V]: each row of B is read
// once as V vectors and multiplied by a broadcast of each row's A element,
// with the whole tile of C in registers over k.
template <int V>
ATTN_INLINE void MulAddTile(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t k,
                            float* c, int64_t ldc) {
  Vec16 acc[kTileRows][V];
  for (int r = 0; r < kTileRows; ++r) {
    for (int v = 0; v < V; ++v) std::memcpy(&acc[r][v], c + r * ldc + 16 * v, sizeof(Vec16));
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    Vec16 row[V];
    for (int v = 0; v < V; ++v) std::memcpy(&row[v], b + kk * ldb + 16 * v, sizeof(Vec16));
#pragma GCC unroll 6
    for (int r = 0; r < kTileRows; ++r) {
      const float x = a[r * lda + kk];
      for (int v = 0; v < V; ++v) acc[r][v] += x * row[v];
    }
  }
  for (int r = 0; r < kTileRows; ++r) {
    for (int v = 0; v < V; ++v) std::memcpy(c + r * ldc + 16 * v, &acc[r][v], sizeof(Vec16));
  }
}

// C[kTileRows x cols] += A[kTileRows x k] B[k x cols] for cols a multiple
// of 16, in column groups of up to 64.
ATTN_INLINE void MulAddRows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t k,
                            float* c, int64_t ldc, int64_t cols) {
  for (int64_t col = 0; col < cols; col += 64) {
    switch (std::min<int64_t>(64, cols - col) / 16) {
      case 4:
        MulAddTile<4>(a, lda, b + col, ldb, k, c + col, ldc);
        break;
      case 3:
        MulAddTile<3>(a, lda, b + col, ldb, k, c + col, ldc);
        break;
      case 2:
        MulAddTile<2>(a, lda, b + col, ldb, k, c + col, ldc);
        break;
      default:
        MulAddTile<1>(a, lda, b + col, ldb, k, c + col, ldc);
        break;
    }
  }
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
template <int64_t kDh>
ATTN_HOT void LinearPrefillOneHead(const LinearPrefillArgs& a, int64_t b, int64_t h,
                                   std::vector<float>& scratch) {
  const int64_t dh = kDh > 0 ? kDh : a.head_dim;
  const int64_t slot = SlotOf(a.slots, b);
  const LinearBlockScratch m(scratch, dh, std::max<int64_t>(1, std::min(a.block, a.time)));
  float* s = a.s + (slot * a.heads + h) * dh * dh;
  float* z = a.z + (slot * a.heads + h) * dh;
  for (int64_t r = 0; r < dh; ++r) std::copy_n(s + r * dh, dh, m.s + r * m.padded_dh);
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
      MulAddRows(phi_q, dh, m.phi_kt, m.padded_block, dh, scores, m.padded_block, width);
      for (int64_t i = i0; i < last; ++i) {  // causal: no key after the query
        std::fill(m.scores + i * m.padded_block + i + 1, m.scores + i * m.padded_block + last,
                  0.0f);
      }
      MulAddRows(phi_q, dh, m.s, m.padded_dh, dh, num, m.padded_dh, m.padded_dh);
      MulAddRows(scores, m.padded_block, m.v, m.padded_dh, last, num, m.padded_dh, m.padded_dh);
      for (int64_t i = i0; i < last; ++i) {
        const float* row = m.scores + i * m.padded_block;
        float den = Dot(m.phi_q + i * dh, z, dh);
#pragma omp simd reduction(+ : den)
        for (int64_t j = 0; j <= i; ++j) den += row[j];
        float* out = a.out + (OutputToken(b, first + i, a.time, a.first_output) * a.heads + h) * dh;
        const float inv = 1.0f / (den + a.eps);
        const float* n = m.numerators + i * m.padded_dh;
        for (int64_t c = 0; c < dh; ++c) out[c] = n[c] * inv;
      }
    }
    // The block's keys join the state.
    for (int64_t r0 = 0; r0 < dh; r0 += kTileRows) {
      MulAddRows(m.phi_kt + r0 * m.padded_block, m.padded_block, m.v, m.padded_dh, len,
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

// Raises the running max c to include k and rescales the sums kept relative
// to it; scale[d] is exp(c_old - c_new), exactly 1 where c did not move.
// Returns true if any channel's max grew.
ATTN_INLINE bool RaiseRunningMax(const float* k, int64_t d_model, float* c, float* num, float* den,
                                 float* scale) {
  int grew = 0;
#pragma omp simd reduction(| : grew)
  for (int64_t d = 0; d < d_model; ++d) {
    const float raised = std::max(c[d], k[d]);
    grew |= raised > c[d];
    scale[d] = FastExp(c[d] - raised);  // exp(-inf) = 0 before the first key
    c[d] = raised;
    num[d] *= scale[d];
    den[d] *= scale[d];
  }
  return grew != 0;
}

// Per-step scratch of the AFT kernel, one row per batch element.
struct AftScratch {
  std::vector<float> scale;     // [B, D] exp(c_old - c_new)
  std::vector<float> exp_bias;  // [B, bias_heads, window] exp(w(t, delta))
  std::vector<char> grew;       // [B] whether any channel's max rose
};

// Phase 1 for one sequence, O(D + window * bias_heads): the key leaving the
// window joins the carried sums, the running max takes the new key (carried
// sums rescaled; the ring is rescaled in phase 2), the new key enters the
// ring, and exp(w) of every visible offset is computed.
ATTN_HOT void AftAdvance(const AftStepArgs& a, int64_t b, AftScratch& scratch) {
  const int64_t dm = a.channels, w = a.window;
  const int64_t slot = SlotOf(a.slots, b);
  const int64_t t = a.lengths[slot];
  const float* k = a.k + b * a.stride;
  const float* v = a.v + b * a.stride;
  float* c = a.c + slot * dm;
  float* num = a.num + slot * dm;
  float* den = a.den + slot * dm;
  if (w > 0 && t >= w) {  // the key at t - w sits in the slot the new key takes
    const float* ek = a.ring_ek + (slot * w + t % w) * dm;
    const float* ekv = a.ring_ekv + (slot * w + t % w) * dm;
    for (int64_t d = 0; d < dm; ++d) {
      num[d] += ekv[d];
      den[d] += ek[d];
    }
  }
  scratch.grew[b] = RaiseRunningMax(k, dm, c, num, den, scratch.scale.data() + b * dm);
  if (w == 0) {  // aft-simple: the new key goes straight into the sums
    for (int64_t d = 0; d < dm; ++d) {
      const float e = FastExp(k[d] - c[d]);
      num[d] += e * v[d];
      den[d] += e;
    }
    return;
  }
  float* ek_new = a.ring_ek + (slot * w + t % w) * dm;
  float* ekv_new = a.ring_ekv + (slot * w + t % w) * dm;
  for (int64_t d = 0; d < dm; ++d) {
    ek_new[d] = FastExp(k[d] - c[d]);
    ekv_new[d] = ek_new[d] * v[d];
  }
  const int64_t visible = std::min(t + 1, w);
  const int64_t bias_row = a.bias_rows > 1 ? t : 0;
  for (int64_t h = 0; h < a.bias_heads; ++h) {
    const float* bias = a.bias + (h * a.bias_rows + bias_row) * w;
    float* out = scratch.exp_bias.data() + (b * a.bias_heads + h) * w;
    for (int64_t delta = 0; delta < visible; ++delta) out[delta] = FastExp(bias[delta]);
  }
}

// Phase 2 for channels [begin, end) of one sequence, O(window * width): the
// ring entries older than the new key are rescaled if the max rose, in the
// same pass that sums them with their bias factors; then the output.
ATTN_HOT void AftWindowSums(const AftStepArgs& a, int64_t b, int64_t begin, int64_t end,
                            const AftScratch& scratch) {
  const int64_t dm = a.channels, w = a.window;
  const int64_t slot = SlotOf(a.slots, b);
  const int64_t t = a.lengths[slot];
  const float* q = a.q + b * a.stride;
  const float* num = a.num + slot * dm;
  const float* den = a.den + slot * dm;
  float* out = a.out + b * dm;
  if (w == 0) {
    for (int64_t d = begin; d < end; ++d) out[d] = Sigmoid(q[d]) * num[d] / den[d];
    return;
  }
  const float* scale = scratch.scale.data() + b * dm;
  const bool rescale = scratch.grew[b] != 0;
  const int64_t visible = std::min(t + 1, w);
  const int64_t group = dm / a.bias_heads;
  float acc_num[kChannelBlock];
  float acc_den[kChannelBlock];
  for (int64_t d = begin; d < end; ++d) {
    acc_num[d - begin] = num[d];
    acc_den[d - begin] = den[d];
  }
  for (int64_t delta = 0; delta < visible; ++delta) {
    const int64_t r = (t - delta) % w;
    float* ek = a.ring_ek + (slot * w + r) * dm;
    float* ekv = a.ring_ekv + (slot * w + r) * dm;
    if (rescale && delta > 0) {  // delta 0 is the new key, already at the new max
      for (int64_t d = begin; d < end; ++d) {
        ek[d] *= scale[d];
        ekv[d] *= scale[d];
      }
    }
    for (int64_t d = begin; d < end;) {  // one run per bias head inside the block
      const int64_t h = d / group;
      const int64_t run_end = std::min(end, (h + 1) * group);
      const float e = scratch.exp_bias[(b * a.bias_heads + h) * w + delta];
      for (int64_t i = d; i < run_end; ++i) {
        acc_num[i - begin] += e * ekv[i];
        acc_den[i - begin] += e * ek[i];
      }
      d = run_end;
    }
  }
  for (int64_t d = begin; d < end; ++d) {
    out[d] = Sigmoid(q[d]) * acc_num[d - begin] / acc_den[d - begin];
  }
}

}  // namespace

void CachedAttentionStep(const CachedAttentionArgs& a) {
  int64_t longest = 1;
  for (int64_t b = 0; b < a.batch; ++b)
    longest = std::max(longest, a.lengths[SlotOf(a.slots, b)] + 1);
  ForEachRowAndHead(a, longest * a.head_dim * (a.r ? 3 : 2),
                    [&](auto head_size, int64_t b, int64_t h, std::vector<float>& scratch) {
                      AttendOneHead<head_size()>(a, b, h, scratch);
                    });
}

void AppendToCache(int64_t batch, int64_t heads, int64_t head_dim, int64_t capacity,
                   const int64_t* slots, const int64_t* lengths, const float* k, const float* v,
                   int64_t stride, float* k_cache, float* v_cache) {
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t slot = SlotOf(slots, b);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t at = ((slot * heads + h) * capacity + lengths[slot]) * head_dim;
      std::copy_n(k + b * stride + h * head_dim, head_dim, k_cache + at);
      std::copy_n(v + b * stride + h * head_dim, head_dim, v_cache + at);
    }
  }
}

float Exp(float x) { return FastExp(x); }

namespace {

ATTN_HOT float SumOfExpMinus(const float* x, int64_t n, float shift) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += FastExp(x[i] - shift);
  return sum;
}

}  // namespace

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

void LinearAttentionStep(const LinearStepArgs& a) {
  ForEachRowAndHead(a, 2 * a.head_dim * a.head_dim,
                    [&](auto head_size, int64_t b, int64_t h, std::vector<float>& scratch) {
                      LinearOneHead<head_size()>(a, b, h, scratch);
                    });
}

void CausalAttentionPrefill(const CausalPrefillArgs& a) {
  // No query to attend: each head would only transpose its keys for nothing.
  if (a.first_output >= a.time) return;
  ForEachRowAndHead(a, (a.time - a.first_output) * (a.start + a.time) * 2 * a.head_dim,
                    [&](auto head_size, int64_t b, int64_t h, std::vector<float>& scratch) {
                      CausalPrefillOneHead<head_size()>(a, b, h, scratch);
                    });
}

void LinearAttentionPrefill(const LinearPrefillArgs& a) {
  ForEachRowAndHead(a, a.time * a.head_dim * (2 * a.head_dim + a.block),
                    [&](auto head_size, int64_t b, int64_t h, std::vector<float>& scratch) {
                      LinearPrefillOneHead<head_size()>(a, b, h, scratch);
                    });
}

void AftStep(const AftStepArgs& a) {
  AftScratch scratch;
  scratch.scale.resize(a.batch * a.channels);
  scratch.exp_bias.resize(a.batch * a.bias_heads * std::max<int64_t>(a.window, 1));
  scratch.grew.resize(a.batch);
  const int64_t advance_work = 4 * a.channels + a.bias_heads * a.window;
  at::parallel_for(0, a.batch, GrainFor(advance_work), [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) AftAdvance(a, b, scratch);
  });
  // Phase 2 splits each sequence's channels into blocks, so that one long
  // sequence (aft-full) still uses every thread.
  int64_t longest = 1;
  for (int64_t b = 0; b < a.batch; ++b) {
    longest = std::max(longest, std::min(a.lengths[SlotOf(a.slots, b)] + 1, a.window));
  }
  const int64_t blocks = (a.channels + kChannelBlock - 1) / kChannelBlock;
  const int64_t block_work = 2 * longest * std::min(a.channels, kChannelBlock);
  at::parallel_for(0, a.batch * blocks, GrainFor(block_work), [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / blocks, first = (task % blocks) * kChannelBlock;
      AftWindowSums(a, b, first, std::min(a.channels, first + kChannelBlock), scratch);
    }
  });
}

}  // namespace attn::kernels
