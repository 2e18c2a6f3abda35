// Small matrix products on register tiles, for the kernels that work a
// block of tokens at a time (the linear attention prefill, Mamba-2's
// chunked scan). Only the kernel files include this.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "model/kernels/kernel_common.h"

namespace attn::kernels {

// Rows per register tile of MulAddRows, under both tilings (AttentionTiles
// in kernels.h): kWide keeps 6 rows x 4 vectors of 16 = 24 accumulators,
// leaving AVX-512's 32 registers room for a row of B and a broadcast;
// kNarrow keeps 6 rows x 2 vectors of 8 = 12, leaving AVX2's 16 the same
// room. Written with 16-float vectors, the AVX2 clone took the tiles apart
// through the stack (perf annotate: most of the linear prefill's samples on
// stores to it).
inline constexpr int64_t kTileRows = 6;

// Rounds n up to a multiple of m.
inline int64_t RoundUp(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// C[kTileRows x V lanes(Vec)] += A[kTileRows x k] B[k x V lanes(Vec)]: each
// row of B is read once as V vectors and multiplied by a broadcast of each
// row's A element, with the whole tile of C in registers over k.
template <typename Vec, int V>
ATTN_INLINE void MulAddTile(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t k,
                            float* c, int64_t ldc) {
  constexpr int64_t kLanes = sizeof(Vec) / sizeof(float);
  Vec acc[kTileRows][V];
  for (int r = 0; r < kTileRows; ++r) {
    for (int v = 0; v < V; ++v) std::memcpy(&acc[r][v], c + r * ldc + kLanes * v, sizeof(Vec));
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    Vec row[V];
    for (int v = 0; v < V; ++v) std::memcpy(&row[v], b + kk * ldb + kLanes * v, sizeof(Vec));
#pragma GCC unroll 6
    for (int r = 0; r < kTileRows; ++r) {
      const float x = a[r * lda + kk];
      for (int v = 0; v < V; ++v) acc[r][v] += x * row[v];
    }
  }
  for (int r = 0; r < kTileRows; ++r) {
    for (int v = 0; v < V; ++v) std::memcpy(c + r * ldc + kLanes * v, &acc[r][v], sizeof(Vec));
  }
}

// C[kTileRows x cols] += A[kTileRows x k] B[k x cols] for cols a multiple
// of 16: kNarrow in column groups of 16, kWide of up to 64. All kTileRows
// rows of A and C are read and written, whether the caller uses them or not.
template <bool kNarrow>
ATTN_INLINE void MulAddRows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t k,
                            float* c, int64_t ldc, int64_t cols) {
  if constexpr (kNarrow) {
    for (int64_t col = 0; col < cols; col += 16) {
      MulAddTile<Vec8, 2>(a, lda, b + col, ldb, k, c + col, ldc);
    }
    return;
  }
  for (int64_t col = 0; col < cols; col += 64) {
    switch (std::min<int64_t>(64, cols - col) / 16) {
      case 4:
        MulAddTile<Vec16, 4>(a, lda, b + col, ldb, k, c + col, ldc);
        break;
      case 3:
        MulAddTile<Vec16, 3>(a, lda, b + col, ldb, k, c + col, ldc);
        break;
      case 2:
        MulAddTile<Vec16, 2>(a, lda, b + col, ldb, k, c + col, ldc);
        break;
      default:
        MulAddTile<Vec16, 1>(a, lda, b + col, ldb, k, c + col, ldc);
        break;
    }
  }
}

}  // namespace attn::kernels
