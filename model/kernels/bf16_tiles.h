// Internal to the bf16 product: the tile loops of the baseline path
// (bf16_gemm.cc) and the two AVX-512 ones (bf16_gemm_avx512.cc,
// bf16_gemm_avx512bf16.cc), written once on GCC's vector types and compiled
// by each file for its instruction set, so no code a CPU without that set
// could run is ever merged into shared functions. A 16-float vector is one
// AVX-512 register; compiled for AVX-512 BF16, a pair's two multiply-adds
// are one vdpbf16ps. The AVX2 path has its own loops in 8-float intrinsics
// (bf16_gemm_avx2.cc): under AVX2 these 16-float vectors kept their sums on
// the stack.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

#include "model/kernels/bf16_gemm.h"

namespace attn::kernels::bf16_tiles {

struct Operands {
  const uint16_t* x;  // rows of the activations rounded to bf16, zero-padded to `pairs` pairs
  int64_t rows, ldx;  // ldx in bf16 values, even
  const uint16_t* w;  // the groups of panels (bf16_gemm.h)
  int64_t out, pairs;
  const float* bias;
  float* y;
  int64_t ldy;
};

// Panels of a group (bf16_gemm.h), the work item of Bf16Gemm's parallel
// loop; a path's tiles read some or all of them at once.
inline constexpr int64_t kGroupPanels = kBf16GroupWidth / kBf16PanelWidth;

// Every row's outputs for the first `count` panels of group `group`.
using RunGroup = void (*)(const Operands& op, int64_t group, int64_t count);

void RunGroupBaseline(const Operands& op, int64_t group, int64_t count);
void RunGroupAvx2(const Operands& op, int64_t group, int64_t count);
void RunGroupAvx512(const Operands& op, int64_t group, int64_t count);
void RunGroupAvx512Bf16(const Operands& op, int64_t group, int64_t count);

// Bytes ahead of a panel's loads at which the tiles prefetch it: at one row
// the product streams the weights from memory (as the int8 product's
// tiles do, int8_tiles.h).
inline constexpr int64_t kPrefetchAhead = 4096;

// Internal linkage: each path's file gets its own copy, compiled for its
// instruction set.
namespace {

#define ATTN_BF16_INLINE inline __attribute__((always_inline))

typedef float Lanes __attribute__((vector_size(64), aligned(4)));
typedef uint32_t Words __attribute__((vector_size(64), aligned(4)));

// A panel's row of 16 pairs (bf16_gemm.h), as loaded.
ATTN_BF16_INLINE Words LoadPairs(const uint16_t* p) {
  Words words;
  std::memcpy(&words, p, sizeof(words));
  return words;
}

ATTN_BF16_INLINE Lanes AsLanes(Words words) {
  Lanes lanes;
  std::memcpy(&lanes, &words, sizeof(lanes));
  return lanes;
}

ATTN_BF16_INLINE float AsFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// A pair of bf16 values, the even k in the low half, widened (exact).
ATTN_BF16_INLINE Lanes EvenOf(Words pairs) { return AsLanes(pairs << 16); }
ATTN_BF16_INLINE Lanes OddOf(Words pairs) { return AsLanes(pairs & 0xFFFF0000u); }

// R rows by P panels of a group, the first at w: y[r, 16 p + j] = bias +
// sum over pairs of bf16(x[r, k]) W[16 p + j, k], the odd k of a pair and
// then the even one (bf16_gemm.h), so a row's result is the same in every
// tile shape and on every path. `width` channels are written from the
// first panel on.
template <int R, int P>
ATTN_BF16_INLINE void Tile(const Operands& op, const uint16_t* x, const uint16_t* w, int64_t width,
                           const float* bias, float* y) {
  Lanes acc[R][P];
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) acc[r][p] = Lanes{};
  }
  for (int64_t pair = 0; pair < op.pairs; ++pair) {
    Words weights[P];
    for (int p = 0; p < P; ++p) {
      const uint16_t* at = w + pair * 2 * kBf16GroupWidth + p * 2 * kBf16PanelWidth;
      __builtin_prefetch(at + kPrefetchAhead / sizeof(uint16_t), 0, 3);  // a 64-byte line
      weights[p] = LoadPairs(at);
    }
    for (int r = 0; r < R; ++r) {
      uint32_t xr;
      std::memcpy(&xr, x + r * op.ldx + 2 * pair, sizeof(xr));
#if defined(__AVX512BF16__)
      const __m512bh xs = (__m512bh)_mm512_set1_epi32(static_cast<int>(xr));
      for (int p = 0; p < P; ++p) {
        acc[r][p] = (Lanes)_mm512_dpbf16_ps((__m512)acc[r][p], (__m512bh)weights[p], xs);
      }
#else
      const float even = AsFloat(xr << 16), odd = AsFloat(xr & 0xFFFF0000u);
      for (int p = 0; p < P; ++p) {
        acc[r][p] += odd * OddOf(weights[p]);
        acc[r][p] += even * EvenOf(weights[p]);
      }
#endif
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) {
      const int64_t first = p * kBf16PanelWidth;
      const int64_t n = std::min<int64_t>(kBf16PanelWidth, width - first);
      if (n <= 0) continue;
      float lanes[kBf16PanelWidth];
      std::memcpy(lanes, &acc[r][p], sizeof(lanes));
      float* out = y + r * op.ldy + first;
      for (int64_t j = 0; j < n; ++j) out[j] = lanes[j] + (bias ? bias[first + j] : 0.0f);
    }
  }
}

template <int R, int P>
ATTN_BF16_INLINE void TileWithPanels(int panels, const Operands& op, const uint16_t* x,
                                     const uint16_t* w, int64_t width, const float* bias,
                                     float* y) {
  if (panels == P) {
    Tile<R, P>(op, x, w, width, bias, y);
  } else if constexpr (P > 1) {
    TileWithPanels<R, P - 1>(panels, op, x, w, width, bias, y);
  }
}

template <int R, int P>
ATTN_BF16_INLINE void TileWithRows(int rows, int panels, const Operands& op, const uint16_t* x,
                                   const uint16_t* w, int64_t width, const float* bias, float* y) {
  if (rows == R) {
    TileWithPanels<R, P>(panels, op, x, w, width, bias, y);
  } else if constexpr (R > 1) {
    TileWithRows<R - 1, P>(rows, panels, op, x, w, width, bias, y);
  }
}

// RunGroup for tiles of up to kRows rows and kPanels panels, sized so that
// the R x P accumulators, P weight vectors and a broadcast fit the path's
// registers. Within a group, tiles of rows pass over the group's weights,
// which stay in the core's cache meanwhile.
template <int kRows, int kPanels>
ATTN_BF16_INLINE void RunGroupWith(const Operands& op, int64_t group, int64_t count) {
  const uint16_t* group_w = op.w + group * kBf16GroupWidth * 2 * op.pairs;
  for (int64_t p = 0; p < count; p += kPanels) {
    const int panels = static_cast<int>(std::min<int64_t>(count - p, kPanels));
    const int64_t column0 = group * kBf16GroupWidth + p * kBf16PanelWidth;
    const int64_t width = std::min<int64_t>(op.out - column0, panels * kBf16PanelWidth);
    const uint16_t* w = group_w + p * 2 * kBf16PanelWidth;
    const float* bias = op.bias ? op.bias + column0 : nullptr;
    for (int64_t r = 0; r < op.rows; r += kRows) {
      const int rows = static_cast<int>(std::min<int64_t>(op.rows - r, kRows));
      TileWithRows<kRows, kPanels>(rows, panels, op, op.x + r * op.ldx, w, width, bias,
                                   op.y + r * op.ldy + column0);
    }
  }
}

#undef ATTN_BF16_INLINE

}  // namespace
}  // namespace attn::kernels::bf16_tiles
