// The int8 product's tiles for CPUs with AVX-512 VNNI (int8_gemm.cc
// dispatches here). Compiled with -mavx512f -mavx512bw -mavx512vnni; holds
// only DotTileAvx512Vnni and what it inlines.
//
// vpdpbusd adds, in each int32 lane, four products of unsigned by signed
// bytes: one output channel's four inputs of a group (the panel layout,
// int8_gemm.h), 64 multiply-adds per instruction. The activations are
// signed, so they go in offset by 128 (a byte's top bit flipped), and the
// sum is corrected by 128 times the channel's sum of Q at the end:
// sum (a + 128) Q = sum a Q + 128 sum Q.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "model/kernels/int8_tiles.h"

namespace attn::kernels::int8_tiles {
namespace {

#define ATTN_INT8_INLINE inline __attribute__((always_inline))

// R rows and P panels: sums[r * kWidth + 16 p + j]. Four rows by four
// panels keep 16 accumulators, the four panels' vectors and a broadcast in
// AVX-512's 32 registers; each group's weights are loaded once for the R
// rows.
template <int R, int P>
ATTN_INT8_INLINE void Tile(const int8_t* a, int64_t k4, const int8_t* w, const int32_t* column_sums,
                           int32_t* sums) {
  const int64_t stride = kInt8PanelWidth * k4;  // between panels
  __m512i acc[R][P];
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_si512();
  }
  const int64_t groups = k4 / 4;
  for (int64_t g = 0; g < groups; ++g) {
    __m512i weights[P];
    for (int p = 0; p < P; ++p) {
      const int8_t* at = w + p * stride + 64 * g;
      _mm_prefetch(reinterpret_cast<const char*>(at + kPrefetchAhead), _MM_HINT_T0);
      weights[p] = _mm512_loadu_si512(at);
    }
    for (int r = 0; r < R; ++r) {
      uint32_t four;
      std::memcpy(&four, a + r * k4 + 4 * g, sizeof(four));
      const __m512i x = _mm512_set1_epi32(static_cast<int32_t>(four ^ 0x80808080u));
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_dpbusd_epi32(acc[r][p], x, weights[p]);
    }
  }
  for (int p = 0; p < P; ++p) {
    // A multiply, not a shift: GCC 12's _mm512_slli_epi32 trips its own
    // maybe-uninitialized check (GCC bug 105593).
    const __m512i offset = _mm512_mullo_epi32(_mm512_loadu_si512(column_sums + p * kInt8PanelWidth),
                                              _mm512_set1_epi32(128));
    for (int r = 0; r < R; ++r) {
      _mm512_storeu_si512(sums + r * kWidth + p * kInt8PanelWidth,
                          _mm512_sub_epi32(acc[r][p], offset));
    }
  }
}

template <int R>
void RowsTile(const int8_t* a, int64_t k4, const int8_t* w, int panels, const int32_t* column_sums,
              int32_t* sums) {
  switch (panels) {
    case 4:
      return Tile<R, 4>(a, k4, w, column_sums, sums);
    case 3:
      return Tile<R, 3>(a, k4, w, column_sums, sums);
    case 2:
      return Tile<R, 2>(a, k4, w, column_sums, sums);
    default:
      return Tile<R, 1>(a, k4, w, column_sums, sums);
  }
}

#undef ATTN_INT8_INLINE

}  // namespace

void DotTileAvx512Vnni(int rows, const int8_t* a, int64_t k4, const int8_t* w, int panels,
                       const int32_t* column_sums, int32_t* sums) {
  switch (rows) {
    case 4:
      return RowsTile<4>(a, k4, w, panels, column_sums, sums);
    case 3:
      return RowsTile<3>(a, k4, w, panels, column_sums, sums);
    case 2:
      return RowsTile<2>(a, k4, w, panels, column_sums, sums);
    default:
      return RowsTile<1>(a, k4, w, panels, column_sums, sums);
  }
}

}  // namespace attn::kernels::int8_tiles
