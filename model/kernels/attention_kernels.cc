// Softmax attention over a key/value cache: the one-token step, the causal
// prefill of a chunk, and appending to the cache (kernels.h).
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "model/kernels/cpu_features.h"
#include "model/kernels/head_tasks.h"
#include "model/kernels/kernel_common.h"
#include "model/kernels/kernels.h"

namespace attn::kernels {
namespace {

// Scores per vector of the score loop: one AVX-512 register.
constexpr int64_t kScoreLanes = 16;

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

// The causal prefill works on tiles of kQueryTile queries against groups of
// kKeyGroup keys. Its score loop takes kScoreTile queries by a key group at a
// time: 16 vector accumulators, each key vector loaded once for the four
// queries, each query's q[r] broadcast once for all the keys. (Six queries,
// 24 accumulators, ran slower.) Those 16 are AVX-512 registers. For AVX2
// (AttentionTiles::kNarrow) the sums are vectors of 8 floats, which fit its
// registers (GCC takes a 16-float vector apart through the stack there), and
// a pass takes 16 keys: 8 registers of sums.
constexpr int64_t kQueryTile = 8;
constexpr int64_t kScoreTile = 4;
constexpr int64_t kKeyGroup = 4 * kScoreLanes;

// The largest lane of x (whose lanes are never NaN).
ATTN_INLINE float LargestLane(const Vec8& m8) {
  const Vec4 c = __builtin_shufflevector(m8, m8, 0, 1, 2, 3);
  const Vec4 d = __builtin_shufflevector(m8, m8, 4, 5, 6, 7);
  const Vec4 m4 = c > d ? c : d;
  float largest = m4[0];
  for (int l = 1; l < 4; ++l) largest = m4[l] > largest ? m4[l] : largest;
  return largest;
}

ATTN_INLINE float LargestLane(const Vec16& x) {
  const Vec8 a = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7);
  const Vec8 b = __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
  return LargestLane(a > b ? a : b);
}

// The vector of the prefill's sums: one register of the instruction set
// its tiles are sized for.
template <bool kNarrow>
struct SumVecOf {
  using Type = Vec16;
};
template <>
struct SumVecOf<true> {
  using Type = Vec8;
};
template <bool kNarrow>
using SumVec = typename SumVecOf<kNarrow>::Type;

// scores[i][l] = q_i . key_{j0 + l} * scale - slope * (position_i - j0 - l)
// for the tile's queries i and l < kKeyGroup, and -inf for keys after
// position_i: the causal mask, which the softmax's exponent turns into 0.
// The group's keys are stored transposed in kt ([dh][kKeyGroup]); score rows
// are kKeyGroup apart. max[i] gets the largest of query i's scores (-inf when
// all are masked; NaN never wins).
template <bool kNarrow>
ATTN_INLINE void ScoreTile(const float* const* q, const int64_t* position, const float* kt,
                           int64_t dh, int64_t j0, float scale, float slope, float* scores,
                           float* max) {
  using V = SumVec<kNarrow>;
  constexpr int kLanes = sizeof(V) / sizeof(float);
  constexpr int kVectors = kKeyGroup / kLanes, kPerPass = kNarrow ? 2 : 4;
  V lane;
  for (int l = 0; l < kLanes; ++l) lane[l] = static_cast<float>(l);
  const V masked = V{} - std::numeric_limits<float>::infinity();
  for (int g0 = 0; g0 < kVectors; g0 += kPerPass) {
    V sum[kScoreTile][kPerPass] = {};
    for (int64_t r = 0; r < dh; ++r) {
      const float* column = kt + r * kKeyGroup + g0 * kLanes;
      V keys[kPerPass];  // loaded one by one: copied whole, the array went through the stack
#pragma GCC unroll 4
      for (int g = 0; g < kPerPass; ++g) std::memcpy(&keys[g], column + g * kLanes, sizeof(V));
#pragma GCC unroll 4
      for (int i = 0; i < kScoreTile; ++i) {
        const float qr = q[i][r];
#pragma GCC unroll 4
        for (int g = 0; g < kPerPass; ++g) sum[i][g] += qr * keys[g];
      }
    }
    for (int i = 0; i < kScoreTile; ++i) {
      V lanes_max = masked;
#pragma GCC unroll 4
      for (int g = 0; g < kPerPass; ++g) {
        const float first = static_cast<float>(position[i] - j0 - (g0 + g) * kLanes);
        const V distance = first - lane;
        V biased = sum[i][g] * scale - slope * distance;
        biased = distance < 0.0f ? masked : biased;
        lanes_max = biased > lanes_max ? biased : lanes_max;
        std::memcpy(scores + i * kKeyGroup + (g0 + g) * kLanes, &biased, sizeof(V));
      }
      const float largest = LargestLane(lanes_max);
      max[i] = g0 == 0 || largest > max[i] ? largest : max[i];
    }
  }
}

// Queries per pass of TileWeightedSum at head size kDh: as many as keep
// their sums in about 24 of AVX-512's 32 registers, or in at most 10 of
// AVX2's 16 (kNarrow: 2 queries up to kDh = 40, else 1).
template <int64_t kDh, bool kNarrow>
constexpr int64_t kWeightedRows = kNarrow ? (kDh <= 40 ? 2 : 1) : (kDh <= 48 ? 8 : 4);

// acc[i][0..kDh) += sum_j p[i * stride + j] v_j for kRows queries i of a
// prefill tile, j = 0..count-1. Each row of v is loaded once for all of
// them: one query at a time (WeightedSumOfRows) the sum made one vector
// load per multiply-add and read the values once per query.
template <int64_t kDh, int64_t kRows, bool kNarrow>
ATTN_INLINE void TileWeightedSum(const float* p, int64_t stride, const float* v, int64_t count,
                                 float* acc) {
  static_assert(kDh > 0 && kDh % 8 == 0, "whole vectors only");
  if constexpr (kNarrow) {  // vectors of 8 (SumVec)
    constexpr int kVectors = kDh / 8;
    Vec8 sum[kRows][kVectors];
#pragma GCC unroll 16
    for (int f = 0; f < kRows * kVectors; ++f) {
      std::memcpy(&sum[f / kVectors][f % kVectors], acc + 8 * f, sizeof(Vec8));
    }
    for (int64_t j = 0; j < count; ++j) {
#pragma GCC unroll 8
      for (int f = 0; f < kVectors; ++f) {
        Vec8 x;  // one load for every query's sum
        std::memcpy(&x, v + j * kDh + 8 * f, sizeof(x));
#pragma GCC unroll 2
        for (int i = 0; i < kRows; ++i) sum[i][f] += p[i * stride + j] * x;
      }
    }
#pragma GCC unroll 16
    for (int f = 0; f < kRows * kVectors; ++f) {
      std::memcpy(acc + 8 * f, &sum[f / kVectors][f % kVectors], sizeof(Vec8));
    }
    return;
  }
  constexpr int kFull = kDh / 16;
  constexpr bool kHalf = kDh % 16 != 0;
  Vec16 full[kRows][kFull > 0 ? kFull : 1] = {};
  Vec8 half[kRows] = {};
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 4
    for (int f = 0; f < kFull; ++f) std::memcpy(&full[i][f], acc + i * kDh + 16 * f, sizeof(Vec16));
    if (kHalf) std::memcpy(&half[i], acc + i * kDh + 16 * kFull, sizeof(half[i]));
  }
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

// acc[0..kDh) = sum_j p[j] v[j], j = 0..count-1, rows of v kDh floats apart.
// The sums stay in registers: kDh / 16 vectors and an 8-float half, twice
// (even and odd keys), so that consecutive keys do not wait on each other;
// with kNarrow, kDh / 8 vectors of 8 floats once (AVX2's 16 registers hold
// no second set at kDh = 64, and kDh / 8 independent sums cover the latency).
template <int64_t kDh, bool kNarrow>
ATTN_INLINE void WeightedSumOfRows(const float* p, const float* v, int64_t count, float* acc) {
  static_assert(kDh > 0 && kDh % 8 == 0, "whole vectors only");
  if constexpr (kNarrow) {  // one query of a prefill tile's sum, from zero
    std::fill(acc, acc + kDh, 0.0f);
    TileWeightedSum<kDh, 1, true>(p, 0, v, count, acc);
    return;
  }
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
template <int64_t kDh, bool kNarrow>
ATTN_INLINE void SoftmaxWeightedSum(float* scores, int64_t count, float max, const float* v,
                                    int64_t dh, float* acc, float* out) {
  const float total = ExpShifted(scores, count, max);
  if constexpr (kDh > 0 && kDh % 8 == 0) {
    WeightedSumOfRows<kDh, kNarrow>(scores, v, count, acc);
  } else {
    std::fill(acc, acc + dh, 0.0f);
    for (int64_t j = 0; j < count; ++j) AddScaled(scores[j], v + j * dh, dh, acc);
  }
  const float inv_total = 1.0f / total;
  for (int64_t i = 0; i < dh; ++i) out[i] = acc[i] * inv_total;
}

// Where query head h of cache row `slot` finds its keys and values.
ATTN_INLINE int64_t CacheRow(const CacheHeadsArgs& a, int64_t slot, int64_t h) {
  const int64_t kv = a.kv_heads > 0 ? a.kv_heads : a.heads;
  return (slot * kv + h / (a.heads / kv)) * a.capacity * a.head_dim;
}

// One head of one row (CachedAttentionStep). kDh > 0 fixes the head size at
// compile time: the dot products unroll, and the weighted sum of values stays
// in registers instead of going through out[] once per key.
template <int64_t kDh, bool kNarrow>
ATTN_HOT void AttendOneHead(const CachedAttentionArgs& a, int64_t b, int64_t h,
                            std::vector<float>& scratch) {
  const int64_t dh = kDh > 0 ? kDh : a.head_dim;
  const int64_t slot = SlotOf(a.slots, b);
  const int64_t length = a.lengths[slot];
  const int64_t row = CacheRow(a, slot, h);
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
  SoftmaxWeightedSum<kDh, kNarrow>(scores, length + 1, MaxOf(scores, length + 1), values, dh, acc,
                                   a.out + (b * a.heads + h) * dh);
}

// kt[r * kKeyGroup + l] = k[l * dh + r] for the first `keys` (at most
// kKeyGroup) rows of k, and zero beyond: one key group, transposed so that
// its scores accumulate along the keys in vector lanes (ScoreTile). A block
// of kScoreLanes keys at a time, so that each run of stores fills a line.
ATTN_INLINE void TransposeKeyGroup(const float* k, int64_t keys, int64_t dh, float* kt) {
  if (keys < kKeyGroup) std::fill(kt, kt + dh * kKeyGroup, 0.0f);
  int64_t j0 = 0;
  for (; j0 + kScoreLanes <= keys; j0 += kScoreLanes) {
    for (int64_t r = 0; r < dh; ++r) {
      float* column = kt + r * kKeyGroup + j0;
#pragma GCC unroll 16
      for (int64_t l = 0; l < kScoreLanes; ++l) column[l] = k[(j0 + l) * dh + r];
    }
  }
  for (int64_t j = j0; j < keys; ++j) {
    for (int64_t r = 0; r < dh; ++r) kt[r * kKeyGroup + j] = k[j * dh + r];
  }
}

// The softmax of a head's queries over the key groups seen so far, in its
// online form (Milakov & Gimelshein, "Online normalizer calculation for
// softmax", 2018): per query the largest score m, and the sum of
// exp(score - m) and the weighted sum of values, both relative to m.
struct RunningSoftmax {
  float* max;    // [queries], -inf before the first group
  float* total;  // [queries]
  float* acc;    // [queries][dh]
};

// Takes one key group's scores of query i (kKeyGroup of them, the largest
// group_max) into its running softmax: m becomes the larger of the two, the
// sums so far are rescaled to it, and the scores become exp(score - m),
// the weights of the group's values, whose sum is added to the total.
ATTN_INLINE void FoldScores(float* scores, float group_max, int64_t dh, int64_t i,
                            const RunningSoftmax& s) {
  const float old = s.max[i];
  if (group_max > old) {  // from -inf the rescale is exp(-inf) = 0, over sums of 0
    const float rescale = FastExp(old - group_max);
    s.total[i] *= rescale;
    for (int64_t d = 0; d < dh; ++d) s.acc[i * dh + d] *= rescale;
    s.max[i] = group_max;
  }
  s.total[i] += ExpShifted(scores, kKeyGroup, s.max[i]);
}

// One tile of queries (`count` real ones, the rest repeats of the last)
// through one key group: kt the group's transposed keys (TransposeKeyGroup),
// v its `keys` values, j0 its first key's position. `run` is the tile's.
template <int64_t kDh, bool kNarrow>
ATTN_INLINE void FoldTile(const float* const* q, const int64_t* position, int64_t count,
                          const float* kt, const float* v, int64_t keys, int64_t j0, int64_t dh,
                          float scale, float slope, float* scores, const RunningSoftmax& run) {
  // The rows a pass over the values takes (kRows at a time), or only the
  // real ones: repeats past them are neither folded nor summed. A tile of
  // fewer than kRows queries (a prompt's last few tokens) sums row by row.
  constexpr bool kFast = kDh > 0 && kDh % 8 == 0;
  constexpr int64_t kRows = kFast ? kWeightedRows<kDh, kNarrow> : 1;
  const int64_t used = count < kRows ? count : (count + kRows - 1) / kRows * kRows;
  float group_max[kQueryTile];
  for (int64_t i0 = 0; i0 < used; i0 += kScoreTile) {
    ScoreTile<kNarrow>(q + i0, position + i0, kt, dh, j0, scale, slope, scores + i0 * kKeyGroup,
                       group_max + i0);
  }
  for (int64_t i = 0; i < used; ++i) FoldScores(scores + i * kKeyGroup, group_max[i], dh, i, run);
  // Keys past the tile's last query weigh 0: leave them out.
  const int64_t reach = std::min(keys, position[kQueryTile - 1] + 1 - j0);
  if constexpr (kFast) {
    if (used < kRows) {
      for (int64_t i = 0; i < used; ++i) {
        TileWeightedSum<kDh, 1, kNarrow>(scores + i * kKeyGroup, kKeyGroup, v, reach,
                                         run.acc + i * kDh);
      }
      return;
    }
    for (int64_t i0 = 0; i0 < used; i0 += kRows) {
      TileWeightedSum<kDh, kRows, kNarrow>(scores + i0 * kKeyGroup, kKeyGroup, v, reach,
                                           run.acc + i0 * kDh);
    }
  } else {
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t j = 0; j < reach; ++j) {
        AddScaled(scores[i * kKeyGroup + j], v + j * dh, dh, run.acc + i * dh);
      }
    }
  }
}

// One head of one row through a.time queries (CausalAttentionPrefill), key
// group by key group: each group's keys are transposed once, and every
// query tile that reaches the group takes its scores and values in turn while
// both sit in the first-level cache; the softmax runs online across groups
// (RunningSoftmax). Why keys outside: tile by tile, every tile of 8 queries
// read all of the row's keys and values, which at a few thousand cached
// tokens no longer fit in the second-level cache (1.5 MB for 3,000 keys of 64
// floats), and the scratch grew with the context. This order was 1.24x
// faster for 121 tokens over 8,000 and 1.44x for 512 over 3,584
// (docs/benchmarks-log.md, "The chat's growth on LFM2"), and its scratch is
// the chunk's. kDh > 0 fixes the head size so that the weighted sum of values
// stays in registers; kNarrow sizes the register tiles for AVX2.
template <int64_t kDh, bool kNarrow>
ATTN_HOT void CausalPrefillOneHead(const CausalPrefillArgs& a, int64_t b, int64_t h,
                                   std::vector<float>& scratch) {
  const int64_t dh = kDh > 0 ? kDh : a.head_dim;
  const int64_t keys = a.start + a.time;
  const int64_t tiles = (a.time - a.first_output + kQueryTile - 1) / kQueryTile;
  const int64_t rows = tiles * kQueryTile;
  scratch.resize(dh * kKeyGroup + kQueryTile * kKeyGroup + rows * (dh + 2));
  float* kt = scratch.data();                    // [Dh][kKeyGroup]
  float* scores = kt + dh * kKeyGroup;           // [kQueryTile][kKeyGroup]
  float* max = scores + kQueryTile * kKeyGroup;  // [rows]
  float* total = max + rows;                     // [rows]
  float* acc = total + rows;                     // [rows][Dh]
  std::fill(max, max + rows, -std::numeric_limits<float>::infinity());
  std::fill(total, acc + rows * dh, 0.0f);
  const int64_t row = CacheRow(a, SlotOf(a.slots, b), h);
  const float* k = a.k_cache + row;
  const float* v = a.v_cache + row;
  const float slope = a.log_slopes ? std::exp(a.log_slopes[h]) : 0.0f;
  const float* q[kQueryTile];
  int64_t position[kQueryTile];
  for (int64_t j0 = 0; j0 < keys; j0 += kKeyGroup) {
    const int64_t group = std::min(kKeyGroup, keys - j0);
    TransposeKeyGroup(k + j0 * dh, group, dh, kt);
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const int64_t t0 = a.first_output + tile * kQueryTile;
      const int64_t count = std::min(kQueryTile, a.time - t0);
      if (a.start + t0 + count - 1 < j0) continue;  // the whole tile comes before the group
      for (int64_t i = 0; i < kQueryTile; ++i) {    // a short tile repeats its last query
        const int64_t t = t0 + std::min(i, count - 1);
        q[i] = a.q + b * a.row_stride + t * a.token_stride + h * dh;
        position[i] = a.start + t;
      }
      const int64_t first = tile * kQueryTile;
      FoldTile<kDh, kNarrow>(q, position, count, kt, v + j0 * dh, group, j0, dh, a.scale, slope,
                             scores, {max + first, total + first, acc + first * dh});
    }
  }
  for (int64_t t = a.first_output; t < a.time; ++t) {
    const int64_t i = t - a.first_output;
    const float inv_total = 1.0f / total[i];
    float* out = a.out + (OutputToken(b, t, a.time, a.first_output) * a.heads + h) * dh;
    for (int64_t d = 0; d < dh; ++d) out[d] = acc[i * dh + d] * inv_total;
  }
}

// Writes key and value head h of a new token (dh floats at k + h * dh, v +
// h * dh) into cache position `length` of cache row `slot`.
ATTN_INLINE void AppendHead(int64_t kv_heads, int64_t dh, int64_t capacity, int64_t slot,
                            int64_t length, int64_t h, const float* k, const float* v,
                            float* k_cache, float* v_cache) {
  const int64_t at = ((slot * kv_heads + h) * capacity + length) * dh;
  std::copy_n(k + h * dh, dh, k_cache + at);
  std::copy_n(v + h * dh, dh, v_cache + at);
}

// The task grid ForEachRowAndHead walks: `heads` tasks per row.
struct TaskGrid {
  int64_t batch, heads, head_dim;
};

}  // namespace

AttentionTiles AttentionTilesForCpu() {
  return CpuHasAvx512() ? AttentionTiles::kWide : AttentionTiles::kNarrow;
}

void CachedAttentionStep(const CachedAttentionArgs& a, AttentionTiles tiles) {
  int64_t longest = 1;
  for (int64_t b = 0; b < a.batch; ++b)
    longest = std::max(longest, a.lengths[SlotOf(a.slots, b)] + 1);
  // A task per row and key/value head, which attends with the query heads
  // that read it (one after another, so the second reads the cache from L2).
  const int64_t kv = a.kv_heads > 0 ? a.kv_heads : a.heads, group = a.heads / kv;
  const auto& fresh = a.append;
  ForEachRowAndHead(
      TaskGrid{a.batch, kv, a.head_dim}, group * longest * a.head_dim * (a.r ? 3 : 2), tiles,
      [&](auto head_size, auto narrow, int64_t b, int64_t g, std::vector<float>& scratch) {
        if (fresh.k != nullptr) {
          const int64_t slot = SlotOf(a.slots, b);
          AppendHead(kv, a.head_dim, a.capacity, slot, a.lengths[slot], g,
                     fresh.k + b * fresh.stride, fresh.v + b * fresh.stride,
                     const_cast<float*>(a.k_cache), const_cast<float*>(a.v_cache));
        }
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          AttendOneHead<head_size(), narrow()>(a, b, h, scratch);
        }
      });
}

void AppendToCache(int64_t batch, int64_t heads, int64_t head_dim, int64_t capacity,
                   const int64_t* slots, const int64_t* lengths, const float* k, const float* v,
                   int64_t stride, float* k_cache, float* v_cache) {
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t slot = SlotOf(slots, b);
    for (int64_t h = 0; h < heads; ++h) {
      AppendHead(heads, head_dim, capacity, slot, lengths[slot], h, k + b * stride, v + b * stride,
                 k_cache, v_cache);
    }
  }
}

void CausalAttentionPrefill(const CausalPrefillArgs& a, AttentionTiles tiles) {
  // No query to attend: each head would only transpose its keys for nothing.
  if (a.first_output >= a.time) return;
  ForEachRowAndHead(
      a, (a.time - a.first_output) * (a.start + a.time) * 2 * a.head_dim, tiles,
      [&](auto head_size, auto narrow, int64_t b, int64_t h, std::vector<float>& scratch) {
        CausalPrefillOneHead<head_size(), narrow()>(a, b, h, scratch);
      });
}

}  // namespace attn::kernels
