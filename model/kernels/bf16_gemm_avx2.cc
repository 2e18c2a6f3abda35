// The bf16 product's tiles for CPUs with AVX2 and FMA (bf16_gemm.cc
// dispatches here). Compiled with -mavx2 -mfma; holds only RunGroupAvx2.
//
// Intrinsics on 8-float registers rather than bf16_tiles.h's 16-float
// vector types: with 16 registers, GCC kept those tiles' accumulators on
// the stack, and one row ran 3x slower than the float32 product. Here a
// row's 64 channels are 8 registers of sums, the two broadcast inputs of a
// pair and a weight register: 11 of 16. The adds are the same as the other
// paths', in the same order (odd k, then even), so the floats are too.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "model/kernels/bf16_tiles.h"

namespace attn::kernels::bf16_tiles {
namespace {

constexpr int kHalves = 2 * kGroupPanels;  // 8-channel registers in a group

// One row's outputs for a group: y[j] = bias[j] + the row's sums, for the
// first `width` channels.
void RunRow(const Operands& op, const uint16_t* x, const uint16_t* group_w, int64_t width,
            const float* bias, float* y) {
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m256 acc[kHalves];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (int64_t pair = 0; pair < op.pairs; ++pair) {
    uint32_t xr;
    std::memcpy(&xr, x + 2 * pair, sizeof(xr));
    const __m256 odd = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(xr & 0xFFFF0000u)));
    const __m256 even = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(xr << 16)));
    const uint16_t* at = group_w + pair * 2 * kBf16GroupWidth;
    for (int line = 0; line < kGroupPanels; ++line) {
      __builtin_prefetch(at + line * 2 * kBf16PanelWidth + kPrefetchAhead / sizeof(uint16_t), 0, 3);
    }
    for (int h = 0; h < kHalves; ++h) {
      const __m256i pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + 16 * h));
      acc[h] = _mm256_fmadd_ps(odd, _mm256_castsi256_ps(_mm256_and_si256(pairs, high)), acc[h]);
      acc[h] = _mm256_fmadd_ps(even, _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16)), acc[h]);
    }
  }
  for (int h = 0; h < kHalves; ++h) {
    float lanes[8];
    _mm256_storeu_ps(lanes, acc[h]);
    const int64_t n = std::min<int64_t>(8, width - 8 * h);
    for (int64_t j = 0; j < n; ++j) y[8 * h + j] = lanes[j] + (bias ? bias[8 * h + j] : 0.0f);
  }
}

}  // namespace

// Row by row over the whole group (zero-padded past `out`, so every panel
// can be read): each pass reads the group's weights as one stream.
void RunGroupAvx2(const Operands& op, int64_t group, int64_t count) {
  const uint16_t* group_w = op.w + group * kBf16GroupWidth * 2 * op.pairs;
  const int64_t column0 = group * kBf16GroupWidth;
  const int64_t width = std::min<int64_t>(op.out - column0, count * kBf16PanelWidth);
  const float* bias = op.bias ? op.bias + column0 : nullptr;
  for (int64_t r = 0; r < op.rows; ++r) {
    RunRow(op, op.x + r * op.ldx, group_w, width, bias, op.y + r * op.ldy + column0);
  }
}

}  // namespace attn::kernels::bf16_tiles
