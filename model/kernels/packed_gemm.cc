#include "model/kernels/packed_gemm.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "model/kernels/cpu_features.h"
#include "model/kernels/kernel_common.h"
#include "model/kernels/packed_tiles.h"

namespace attn::kernels {
namespace {

using packed_tiles::Ahead;
using packed_tiles::AheadFor;
using packed_tiles::GemmArgs;
using packed_tiles::Item;
using packed_tiles::ItemAt;
using packed_tiles::StepsFetching;

// Sixteen floats: one AVX-512 register (two AVX2 ones, four SSE ones in the
// baseline clone). aligned(4): loads and stores need no alignment.
typedef float Lanes __attribute__((vector_size(64), aligned(4)));

// Rows per tile: 12 rows x 2 halves of a panel = 24 accumulators, leaving
// AVX-512's 32 registers room for the two weight vectors and a broadcast.
constexpr int kTileRows = 12;

__attribute__((always_inline)) inline Lanes Load(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

__attribute__((always_inline)) inline void Store(float* p, const Lanes& v) {
  std::memcpy(p, &v, sizeof(v));
}

// y[r, 0:width] = x[r, :] . panel + bias32 for R rows; width <= 32 columns
// are kept (the panel is zero-padded beyond the matrix). With kPrefetch,
// the tile fetches `ahead` meanwhile; a template flag, so that a tile that
// fetches nothing carries neither the prefetches nor a test for them.
template <int R, bool kPrefetch>
__attribute__((always_inline)) inline void Tile(const float* x, int64_t ldx, const float* panel,
                                                int64_t in, const float* bias32, float* y,
                                                int64_t ldy, int64_t width, const Ahead& ahead) {
  Lanes lo[R], hi[R];
  const Lanes bias_lo = Load(bias32), bias_hi = Load(bias32 + 16);
  for (int r = 0; r < R; ++r) {
    lo[r] = bias_lo;
    hi[r] = bias_hi;
  }
  const auto step = [&](int64_t k) __attribute__((always_inline)) {
    const Lanes w_lo = Load(panel + k * kPanelWidth);
    const Lanes w_hi = Load(panel + k * kPanelWidth + 16);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const float xr = x[r * ldx + k];
      lo[r] += xr * w_lo;
      hi[r] += xr * w_hi;
    }
  };
  StepsFetching<kPrefetch>(in, ahead, step);
  for (int r = 0; r < R; ++r) {
    float* row = y + r * ldy;
    if (width == kPanelWidth) {
      Store(row, lo[r]);
      Store(row + 16, hi[r]);
    } else {
      float full[kPanelWidth];
      Store(full, lo[r]);
      Store(full + 16, hi[r]);
      std::memcpy(row, full, sizeof(float) * width);
    }
  }
}

// The one-row case of Tile: with a single row, Tile's two accumulators form
// two chains of dependent multiply-adds, so the product waits on FMA latency
// (4 cycles) instead of streaming the panel. Four steps of k run on separate
// accumulators and are summed at the end.
__attribute__((always_inline)) inline void TileOneRow(const float* x, const float* panel,
                                                      int64_t in, const float* bias32, float* y,
                                                      int64_t width) {
  constexpr int kChains = 4;
  Lanes lo[kChains] = {}, hi[kChains] = {};
  lo[0] = Load(bias32);
  hi[0] = Load(bias32 + 16);
  int64_t k = 0;
  for (; k + kChains <= in; k += kChains) {
#pragma GCC unroll 4
    for (int c = 0; c < kChains; ++c) {
      const float* w = panel + (k + c) * kPanelWidth;
      lo[c] += x[k + c] * Load(w);
      hi[c] += x[k + c] * Load(w + 16);
    }
  }
  for (; k < in; ++k) {
    lo[0] += x[k] * Load(panel + k * kPanelWidth);
    hi[0] += x[k] * Load(panel + k * kPanelWidth + 16);
  }
  float full[kPanelWidth];
  Store(full, (lo[0] + lo[1]) + (lo[2] + lo[3]));
  Store(full + 16, (hi[0] + hi[1]) + (hi[2] + hi[3]));
  std::memcpy(y, full, sizeof(float) * width);
}

// Work items are (panel, row tile) pairs in panel-major order, so the items
// one thread runs share panels and each panel stays in cache for its tiles.
ATTN_HOT void RunItems(const GemmArgs& a, int64_t begin, int64_t end) {
  for (int64_t index = begin; index < end; ++index) {
    const Item item = ItemAt(a, index);
    const float *x = item.x, *weights = item.weights, *bias32 = item.bias32;
    float* y = item.y;
    const int64_t row0 = item.row0, width = item.width;
    if (a.rows == 1) {
      TileOneRow(x, weights, a.in, bias32, y, width);
      continue;
    }
    const Ahead ahead = AheadFor(a, item.panel, row0, weights);
    switch (std::min<int64_t>(kTileRows, a.rows - row0)) {
#define ATTN_TILE_CASE(R)                                                      \
  case R:                                                                      \
    if (ahead.rows > 0) {                                                      \
      Tile<R, true>(x, a.ldx, weights, a.in, bias32, y, a.ldy, width, ahead);  \
    } else {                                                                   \
      Tile<R, false>(x, a.ldx, weights, a.in, bias32, y, a.ldy, width, ahead); \
    }                                                                          \
    break;
      ATTN_TILE_CASE(1)
      ATTN_TILE_CASE(2)
      ATTN_TILE_CASE(3)
      ATTN_TILE_CASE(4)
      ATTN_TILE_CASE(5)
      ATTN_TILE_CASE(6)
      ATTN_TILE_CASE(7)
      ATTN_TILE_CASE(8)
      ATTN_TILE_CASE(9)
      ATTN_TILE_CASE(10)
      ATTN_TILE_CASE(11)
      ATTN_TILE_CASE(12)
#undef ATTN_TILE_CASE
      default:
        break;
    }
  }
}

int64_t Panels(int64_t out) { return (out + kPanelWidth - 1) / kPanelWidth; }

// Where RunItems reads a product's inputs: the rows as given, or a copy of
// them a cache line further apart. Why: with more rows than one tile and a
// row stride that is a multiple of 4 KiB (1,024 floats: the width of
// LFM2-350M and RWKV-7 0.4B), a tile's 12 inputs of one step fall in one
// set of the L1 cache. At 57 rows (A/B in one process, best of 60, AMD Zen
// 5) products of 1,024 inputs ran 12-26% faster on the copy,
// granite-4.0-h-1b's of 3,072 and 4,096 inputs 5-21%, of 2,048 inputs
// 0-2%; copying rows whose stride is no such multiple (768, 1,280, 1,536
// floats) moved them by -4% to +5%, so those keep their rows. The copy is
// rows x in floats on the calling thread, small beside a product of
// `out` >= 256 columns. Its buffer is the thread's own and is kept for its
// next product, so it is bounded: at most 8 MiB (Dense calls with at most
// 256 rows, 4.7 MB at 4,608 inputs); larger products read their rows as
// given.
struct Inputs {
  const float* x;
  int64_t ldx;
};

Inputs SpreadInputs(const float* x, int64_t rows, int64_t ldx, int64_t in, int64_t out) {
  constexpr int64_t kAliasingStride = 1024, kMinOut = 256, kLineFloats = 16;
  constexpr int64_t kMaxFloats = int64_t{1} << 21;
  if (rows <= kTileRows || ldx % kAliasingStride != 0 || out < kMinOut ||
      rows * (in + kLineFloats) > kMaxFloats) {
    return {x, ldx};
  }
  thread_local std::vector<float> spread;
  const int64_t stride = in + kLineFloats;
  spread.resize(static_cast<size_t>(rows * stride));
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(spread.data() + r * stride, x + r * ldx, sizeof(float) * in);
  }
  return {spread.data(), stride};
}

}  // namespace

int64_t PackedWeightSize(int64_t out, int64_t in) { return Panels(out) * in * kPanelWidth; }

void PackWeight(const float* w, int64_t out, int64_t in, int64_t ldw, float* packed) {
  std::memset(packed, 0, sizeof(float) * PackedWeightSize(out, in));
  for (int64_t o = 0; o < out; ++o) {
    float* panel = packed + (o / kPanelWidth) * in * kPanelWidth + o % kPanelWidth;
    for (int64_t k = 0; k < in; ++k) panel[k * kPanelWidth] = w[o * ldw + k];
  }
}

PackedPath PackedGemmPath() {
  return !CpuHasAvx512() && CpuHasAvx2() ? PackedPath::kAvx2 : PackedPath::kVectorTiles;
}

bool CpuRuns(PackedPath path) { return path == PackedPath::kVectorTiles || CpuHasAvx2(); }

const char* PackedPathName(PackedPath path) {
  if (path == PackedPath::kAvx2) return "AVX2";
  return CpuHasAvx512() ? "AVX-512" : "vector tiles (slow without AVX-512)";
}

void PackedGemmOn(PackedPath path, const float* x, int64_t rows, int64_t ldx, const float* packed,
                  int64_t out, int64_t in, const float* bias, float* y, int64_t ldy) {
  if (rows <= 0 || out <= 0) return;
  const bool avx2 = path == PackedPath::kAvx2;
  const int64_t tile_rows = avx2 ? packed_tiles::kAvx2TileRows : kTileRows;
  const int64_t tiles = (rows + tile_rows - 1) / tile_rows;
  const Inputs inputs = avx2 ? Inputs{x, ldx} : SpreadInputs(x, rows, ldx, in, out);
  const GemmArgs args{inputs.x, rows, inputs.ldx, packed, out, in, bias, y, ldy, tile_rows, tiles};
  const int64_t items = Panels(out) * tiles;
  const int64_t work_per_item = std::min(rows, tile_rows) * kPanelWidth * in;
  at::parallel_for(0, items, GrainFor(work_per_item), [&](int64_t begin, int64_t end) {
    if (avx2) {
      packed_tiles::RunItemsAvx2(args, begin, end);
    } else {
      RunItems(args, begin, end);
    }
  });
}

void PackedGemm(const float* x, int64_t rows, int64_t ldx, const float* packed, int64_t out,
                int64_t in, const float* bias, float* y, int64_t ldy) {
  PackedGemmOn(PackedGemmPath(), x, rows, ldx, packed, out, in, bias, y, ldy);
}

bool PackedGemmIsFast() { return CpuHasAvx512() || CpuHasAvx2(); }

}  // namespace attn::kernels
