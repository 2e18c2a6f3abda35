// The packed product's tiles for CPUs with AVX2 and FMA but not AVX-512
// (packed_gemm.cc dispatches here). Compiled with -mavx2 -mfma; holds only
// RunItemsAvx2.
//
// Intrinsics on 8-float registers rather than packed_gemm.cc's 16-float
// vector types: that file's tiles keep 24 such vectors (48 AVX2 registers)
// of sums, which GCC spills to the stack on every step. Here a tile is at
// most 3 rows by a whole panel: 12 registers of sums.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "model/kernels/packed_gemm.h"
#include "model/kernels/packed_tiles.h"

namespace attn::kernels::packed_tiles {
namespace {

constexpr int64_t kHalf = kPanelWidth / 2;

// Writes the first `width` of 16 sums (two registers) to y.
inline void StoreHalf(float* y, __m256 lo, __m256 hi, int64_t width) {
  if (width >= kHalf) {
    _mm256_storeu_ps(y, lo);
    _mm256_storeu_ps(y + 8, hi);
    return;
  }
  float full[kHalf];
  _mm256_storeu_ps(full, lo);
  _mm256_storeu_ps(full + 8, hi);
  std::memcpy(y, full, sizeof(float) * width);
}

// y[r, 0:width] = x[r, :] . panel + bias32 for R <= 3 rows: 4R registers
// of sums, R broadcast inputs and one register of weights at a time, 16 at
// R = 3. The panel streams in order, whole cache lines at a time. With
// kPrefetch the tile fetches its share of the next panel meanwhile
// (AheadFor); a template flag, as in packed_gemm.cc.
template <int R, bool kPrefetch>
void Tile(const float* x, int64_t ldx, const float* panel, int64_t in, const float* bias32,
          float* y, int64_t ldy, int64_t width, const Ahead& ahead) {
  __m256 acc[R][4];
  for (int v = 0; v < 4; ++v) {
    const __m256 bias = _mm256_loadu_ps(bias32 + 8 * v);
    for (int r = 0; r < R; ++r) acc[r][v] = bias;
  }
  const auto step = [&](int64_t k) __attribute__((always_inline)) {
    __m256 xr[R];
    for (int r = 0; r < R; ++r) xr[r] = _mm256_broadcast_ss(x + r * ldx + k);
    const float* w = panel + k * kPanelWidth;
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m256 wv = _mm256_loadu_ps(w + 8 * v);
      for (int r = 0; r < R; ++r) acc[r][v] = _mm256_fmadd_ps(xr[r], wv, acc[r][v]);
    }
  };
  StepsFetching<kPrefetch>(in, ahead, step);
  for (int r = 0; r < R; ++r) {
    StoreHalf(y + r * ldy, acc[r][0], acc[r][1], width);
    if (width > kHalf) StoreHalf(y + r * ldy + kHalf, acc[r][2], acc[r][3], width - kHalf);
  }
}

// Tile<R> with or without the prefetch.
template <int R>
void TileFetching(const float* x, int64_t ldx, const float* panel, int64_t in, const float* bias32,
                  float* y, int64_t ldy, int64_t width, const Ahead& ahead) {
  if (ahead.rows > 0) {
    Tile<R, true>(x, ldx, panel, in, bias32, y, ldy, width, ahead);
  } else {
    Tile<R, false>(x, ldx, panel, in, bias32, y, ldy, width, ahead);
  }
}

// One row against a whole panel: its 32 columns are 4 registers of sums,
// and two steps of k run on separate sums (8 registers), so the loop
// streams the panel instead of waiting on each multiply-add's latency.
void TileOneRow(const float* x, const float* panel, int64_t in, const float* bias32, float* y,
                int64_t width) {
  __m256 even[4], odd[4];
  for (int v = 0; v < 4; ++v) {
    even[v] = _mm256_loadu_ps(bias32 + 8 * v);
    odd[v] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 2 <= in; k += 2) {
    const __m256 x0 = _mm256_broadcast_ss(x + k), x1 = _mm256_broadcast_ss(x + k + 1);
    const float* w = panel + k * kPanelWidth;
    for (int v = 0; v < 4; ++v) {
      even[v] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(w + 8 * v), even[v]);
      odd[v] = _mm256_fmadd_ps(x1, _mm256_loadu_ps(w + kPanelWidth + 8 * v), odd[v]);
    }
  }
  if (k < in) {
    const __m256 x0 = _mm256_broadcast_ss(x + k);
    for (int v = 0; v < 4; ++v) {
      even[v] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(panel + k * kPanelWidth + 8 * v), even[v]);
    }
  }
  StoreHalf(y, _mm256_add_ps(even[0], odd[0]), _mm256_add_ps(even[1], odd[1]), width);
  if (width > kHalf) {
    StoreHalf(y + kHalf, _mm256_add_ps(even[2], odd[2]), _mm256_add_ps(even[3], odd[3]),
              width - kHalf);
  }
}

}  // namespace

void RunItemsAvx2(const GemmArgs& a, int64_t begin, int64_t end) {
  for (int64_t index = begin; index < end; ++index) {
    const Item item = ItemAt(a, index);
    const float *x = item.x, *weights = item.weights, *bias32 = item.bias32;
    float* y = item.y;
    const int64_t width = item.width;
    if (a.rows == 1) {
      TileOneRow(x, weights, a.in, bias32, y, width);
      continue;
    }
    const Ahead ahead = AheadFor(a, item.panel, item.row0, weights);
    switch (std::min(a.tile_rows, a.rows - item.row0)) {
      case 1:
        TileFetching<1>(x, a.ldx, weights, a.in, bias32, y, a.ldy, width, ahead);
        break;
      case 2:
        TileFetching<2>(x, a.ldx, weights, a.in, bias32, y, a.ldy, width, ahead);
        break;
      default:
        TileFetching<3>(x, a.ldx, weights, a.in, bias32, y, a.ldy, width, ahead);
        break;
    }
  }
}

}  // namespace attn::kernels::packed_tiles
