// The int8 product's tiles for CPUs with AVX2 (int8_gemm.cc dispatches
// here). Compiled with -mavx2; holds only DotTileAvx2 and what it inlines.
//
// vpmaddubsw multiplies unsigned bytes by signed bytes and adds pairs into
// saturating int16. The activations are signed, so the unsigned operand is
// |a| and the weights take a's sign (vpsignb): each pair sum is at most
// 2 x 127 x 127 = 32,258 and never saturates. vpmaddwd with ones then adds
// pairs of those into the int32 lanes, which hold one output channel's four
// inputs of a group (the panel layout, int8_gemm.h).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "model/kernels/int8_tiles.h"

namespace attn::kernels::int8_tiles {
namespace {

#define ATTN_INT8_INLINE inline __attribute__((always_inline))

// acc[r][h] += the group's products for R rows and one panel's two halves
// (channels 0-7 and 8-15).
template <int R>
ATTN_INT8_INLINE void GroupStep(const int8_t* a, int64_t k4, const int8_t* w, int64_t g,
                                __m256i (&acc)[R][2]) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * g));
  const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * g + 32));
  for (int r = 0; r < R; ++r) {
    int32_t four;
    std::memcpy(&four, a + r * k4 + 4 * g, sizeof(four));
    const __m256i x = _mm256_set1_epi32(four);
    const __m256i magnitude = _mm256_abs_epi8(x);
    const __m256i p0 = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(w0, x));
    const __m256i p1 = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(w1, x));
    acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(p0, ones));
    acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(p1, ones));
  }
}

// One panel for R rows: sums[r * kWidth + j], j < 16.
template <int R>
void PanelTile(const int8_t* a, int64_t k4, const int8_t* w, int32_t* sums) {
  __m256i acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  const int64_t groups = k4 / 4;
  for (int64_t g = 0; g < groups; ++g) {
    _mm_prefetch(reinterpret_cast<const char*>(w + 64 * g + kPrefetchAhead), _MM_HINT_T0);
    GroupStep<R>(a, k4, w, g, acc);
  }
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + r * kWidth), acc[r][0]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + r * kWidth + 8), acc[r][1]);
  }
}

#undef ATTN_INT8_INLINE

}  // namespace

void DotTileAvx2(int rows, const int8_t* a, int64_t k4, const int8_t* w, int panels,
                 const int32_t* /*column_sums*/, int32_t* sums) {
  for (int p = 0; p < panels; ++p) {
    const int8_t* panel = w + p * kInt8PanelWidth * k4;
    int32_t* out = sums + p * kInt8PanelWidth;
    switch (rows) {
      case 4:
        PanelTile<4>(a, k4, panel, out);
        break;
      case 3:
        PanelTile<3>(a, k4, panel, out);
        break;
      case 2:
        PanelTile<2>(a, k4, panel, out);
        break;
      default:
        PanelTile<1>(a, k4, panel, out);
    }
  }
}

}  // namespace attn::kernels::int8_tiles
