// Internal to the bf16 product (bf16_gemm.cc and the files of its
// instruction-set paths). The tile loops are written once, on GCC's vector
// types, and each path's file compiles them for its instruction set, so no
// code a CPU without that set could run is ever merged into shared
// functions: a 16-float vector is one AVX-512 register, two AVX2 ones or
// four SSE ones.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "model/kernels/bf16_gemm.h"

namespace attn::kernels::bf16_tiles {

struct Operands {
  const float* x;
  int64_t rows, ldx;
  const uint16_t* w;  // the groups of panels (bf16_gemm.h)
  int64_t out, in;
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

// Bytes ahead of a panel's loads at which the tiles prefetch it: at one row
// the product streams the weights from memory (as the int8 product's
// tiles do, int8_tiles.h).
inline constexpr int64_t kPrefetchAhead = 4096;

// Internal linkage: each path's file gets its own copy, compiled for its
// instruction set.
namespace {

#define ATTN_BF16_INLINE inline __attribute__((always_inline))

typedef float Lanes __attribute__((vector_size(64), aligned(4)));
typedef uint16_t Halves __attribute__((vector_size(32), aligned(2)));
typedef uint32_t Words __attribute__((vector_size(64), aligned(4)));

// 16 bf16 values widened to the floats they stand for (exact).
ATTN_BF16_INLINE Lanes Widen(const uint16_t* p) {
  Halves halves;
  std::memcpy(&halves, p, sizeof(halves));
  const Words bits = __builtin_convertvector(halves, Words) << 16;
  Lanes lanes;
  std::memcpy(&lanes, &bits, sizeof(lanes));
  return lanes;
}

// R rows by P panels of a group, the first at w: y[r, 16 p + j] = bias +
// sum_k x[r, k] W[16 p + j, k], summed over k in order (one chain per
// output), so a row's result is the same in every tile shape. `width`
// channels are written from the first panel on.
template <int R, int P>
ATTN_BF16_INLINE void Tile(const Operands& op, const float* x, const uint16_t* w, int64_t width,
                           const float* bias, float* y) {
  Lanes acc[R][P];
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) acc[r][p] = Lanes{};
  }
  for (int64_t k = 0; k < op.in; ++k) {
    Lanes weights[P];
    for (int p = 0; p < P; ++p) {
      const uint16_t* at = w + k * kBf16GroupWidth + p * kBf16PanelWidth;
      // Once per 64-byte line: every other panel.
      if (p % 2 == 0) __builtin_prefetch(at + kPrefetchAhead / sizeof(uint16_t), 0, 3);
      weights[p] = Widen(at);
    }
    for (int r = 0; r < R; ++r) {
      const float xr = x[r * op.ldx + k];
      for (int p = 0; p < P; ++p) acc[r][p] += xr * weights[p];
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
ATTN_BF16_INLINE void TileWithPanels(int panels, const Operands& op, const float* x,
                                     const uint16_t* w, int64_t width, const float* bias,
                                     float* y) {
  if (panels == P) {
    Tile<R, P>(op, x, w, width, bias, y);
  } else if constexpr (P > 1) {
    TileWithPanels<R, P - 1>(panels, op, x, w, width, bias, y);
  }
}

template <int R, int P>
ATTN_BF16_INLINE void TileWithRows(int rows, int panels, const Operands& op, const float* x,
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
  const uint16_t* group_w = op.w + group * kBf16GroupWidth * op.in;
  for (int64_t p = 0; p < count; p += kPanels) {
    const int panels = static_cast<int>(std::min<int64_t>(count - p, kPanels));
    const int64_t column0 = group * kBf16GroupWidth + p * kBf16PanelWidth;
    const int64_t width = std::min<int64_t>(op.out - column0, panels * kBf16PanelWidth);
    const uint16_t* w = group_w + p * kBf16PanelWidth;
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
