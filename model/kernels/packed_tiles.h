// Internal to the packed product (packed_gemm.h): what its instruction-set
// files share. Nothing outside model/kernels includes this.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "model/kernels/packed_gemm.h"

namespace attn::kernels::packed_tiles {

// One product, and how it is cut into work items: (panel, row tile) pairs
// in panel-major order, `tiles` row tiles of `tile_rows` rows per panel.
struct GemmArgs {
  const float* x;
  int64_t rows, ldx;
  const float* packed;
  int64_t out, in;
  const float* bias;
  float* y;
  int64_t ldy;
  int64_t tile_rows;
  int64_t tiles;
};

// Where work item `index` of a product lies: its panel and the panel's
// weights, its first input and output rows, the panel's columns kept
// (`width`, at most 32) and their bias (zeros beyond `width`, or without a
// bias).
struct Item {
  int64_t panel, row0, width;
  const float* x;
  const float* weights;
  float* y;
  float bias32[kPanelWidth] = {};
};

inline __attribute__((always_inline)) Item ItemAt(const GemmArgs& a, int64_t index) {
  Item item;
  item.panel = index / a.tiles;
  const int64_t column0 = item.panel * kPanelWidth;
  item.row0 = (index % a.tiles) * a.tile_rows;
  item.width = std::min(kPanelWidth, a.out - column0);
  if (a.bias != nullptr) std::memcpy(item.bias32, a.bias + column0, sizeof(float) * item.width);
  item.x = a.x + item.row0 * a.ldx;
  item.weights = a.packed + item.panel * a.in * kPanelWidth;
  item.y = a.y + item.row0 * a.ldy + column0;
  return item;
}

// Rows per tile of the AVX2 path: 3 rows x a 32-column panel of sums are 12
// of AVX2's 16 registers, with three for the rows' broadcast inputs and one
// for the weights.
inline constexpr int64_t kAvx2TileRows = 3;

// Items [begin, end) on AVX2 and FMA (packed_gemm_avx2.cc, compiled for
// them; call only where the CPU has both).
void RunItemsAvx2(const GemmArgs& a, int64_t begin, int64_t end);

}  // namespace attn::kernels::packed_tiles
