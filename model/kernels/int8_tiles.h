// Internal to the int8 product (int8_gemm.cc and the files of its
// instruction-set paths): the one routine each path supplies. A path's file
// is compiled for its instruction set and holds nothing else, so no code a
// CPU without that set could run is ever merged into shared functions.
#pragma once

#include <cstdint>

#include "model/kernels/int8_gemm.h"

namespace attn::kernels::int8_tiles {

inline constexpr int kMaxRows = 4;    // rows of activations a tile reads
inline constexpr int kMaxPanels = 4;  // panels a tile reads
inline constexpr int kWidth = kMaxPanels * static_cast<int>(kInt8PanelWidth);

// sums[r * kWidth + j] = sum_k a[r * k4 + k] Q[j, k] for r < rows (1 to
// kMaxRows) and j < 16 * panels (1 to kMaxPanels panels from w, each
// 16 * k4 bytes, Int8Gemm's layout). k4 is a multiple of four; a holds
// quantised activations, zero past `in`; column_sums are the panels'
// channels' sums of Q (for the paths that offset a).
using DotTile = void (*)(int rows, const int8_t* a, int64_t k4, const int8_t* w, int panels,
                         const int32_t* column_sums, int32_t* sums);

void DotTileAvx2(int rows, const int8_t* a, int64_t k4, const int8_t* w, int panels,
                 const int32_t* column_sums, int32_t* sums);
void DotTileAvx512Vnni(int rows, const int8_t* a, int64_t k4, const int8_t* w, int panels,
                       const int32_t* column_sums, int32_t* sums);

// Bytes ahead of a panel's loads at which the paths prefetch it: at one row
// the product streams the weights from memory, and the hardware prefetcher
// alone does not keep a few panels' streams per thread fed (docs/
// benchmarks-log.md, "Int8 weights").
inline constexpr int64_t kPrefetchAhead = 4096;

}  // namespace attn::kernels::int8_tiles
