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

// Where a tile fetches part of the next panel into cache (AheadFor says
// which part): `rows` of its k-rows from `from`, one every `every` steps.
struct Ahead {
  const float* from = nullptr;
  int64_t rows = 0;
  int64_t every = 1;
};

// The share of the next panel that the tile at `row0` fetches while it
// runs: the panel's tiles split its k-rows evenly, each spreading its share
// over its own steps. A model step's weights (7.5 MB in the bundled models,
// hundreds of MB at the public shapes) do not stay in cache from one step
// to the next, and without a prefetch a panel's first tile waits on them. Fetching
// the whole next panel in the first tile, two lines every step of k, asks
// two threads for more than the memory delivers: at 51 rows (five tiles a
// panel) that tile took 2.5 times as long as the others, 41% of the
// product (perf, LFM2-350M's shapes, AMD Zen 5). Spread over the tiles,
// products of 24 to 256 rows ran 1.01-1.13x faster (alternating in one
// process); up to 12 rows there is one tile a panel and nothing changes.
// The AVX2 path's 3-row tiles, run on the same machine, gained 1.09-1.24x at
// 51 to 128 rows and 1.01-1.08x at 186 and 256; at 6 to 24 rows the runs
// spread from 0.91x to 1.41x as the VM's bandwidth moved. The one-row case
// streams its panels and was 3-5% slower with a prefetch, so it has none.
inline Ahead AheadFor(const GemmArgs& a, int64_t panel, int64_t row0, const float* weights) {
  if ((panel + 1) * kPanelWidth >= a.out) return {};
  const int64_t tile = row0 / a.tile_rows;
  const int64_t share = (a.in + a.tiles - 1) / a.tiles;
  const int64_t first = std::min(a.in, tile * share);
  const int64_t rows = std::min(a.in, first + share) - first;
  if (rows <= 0) return {};
  return {weights + (a.in + first) * kPanelWidth, rows, std::max<int64_t>(1, a.in / rows)};
}

// Runs step(k) for k = 0..in-1; with kPrefetch, fetches `ahead`'s k-rows
// of the next panel meanwhile, one every `ahead.every` steps. Inlined into
// each tile, so its loops keep the tile's sums in registers.
template <bool kPrefetch, typename Step>
__attribute__((always_inline)) inline void StepsFetching(int64_t in, const Ahead& ahead,
                                                         Step& step) {
  int64_t k = 0;
  if constexpr (kPrefetch) {
    for (int64_t f = 0; f < ahead.rows; ++f) {
      __builtin_prefetch(ahead.from + f * kPanelWidth, 0, 2);
      __builtin_prefetch(ahead.from + f * kPanelWidth + 16, 0, 2);
      const int64_t stop = std::min(in, k + ahead.every);
      for (; k < stop; ++k) step(k);
    }
  }
  for (; k < in; ++k) step(k);
}

// Rows per tile of the AVX2 path: 3 rows x a 32-column panel of sums are 12
// of AVX2's 16 registers, with three for the rows' broadcast inputs and one
// for the weights.
inline constexpr int64_t kAvx2TileRows = 3;

// Items [begin, end) on AVX2 and FMA (packed_gemm_avx2.cc, compiled for
// them; call only where the CPU has both).
void RunItemsAvx2(const GemmArgs& a, int64_t begin, int64_t end);

}  // namespace attn::kernels::packed_tiles
