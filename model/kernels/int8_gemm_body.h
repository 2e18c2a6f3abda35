// Internal to int8_gemm.cc and int8_gemm_avx2.cc: the loops of Int8Gemm,
// compiled twice, once for baseline x86-64 and once with -mavx2 -mfma (the
// runtime picks one, int8_gemm.cc). Each includer wraps this file in its own
// namespace and includes <cstdint>, <cstring> (and <immintrin.h> for AVX2)
// first; the file itself includes nothing and instantiates no
// standard-library template, so no code compiled for AVX2 can be merged into
// a function that other CPUs run.
//
// The weights come in panels of kInt8PanelWidth (8) output channels
// (int8_gemm.h): for each k, the panel's eight values are adjacent. A tile
// of R rows and P panels keeps R * P * 8 sums in vector lanes and, for each
// k, converts the panels' 8 P values to float once, broadcasts each row's
// x[r, k] and adds their products: no sums across lanes, and each panel is
// read front to back, one stream the prefetcher follows.
//
// Tiles: one row takes four panels at a time, two and four rows two panels
// (the last group of a range takes the panels left). No tile holds more
// than eight accumulators: with the converted weights and a broadcast row
// value, more would not fit AVX2's sixteen vector registers and would spill
// on every step (a one-row tile with sixteen measured 1.6x slower). Four
// rows share each conversion, which costs two instructions besides its
// multiply-add, so the 4x2 tile is bound by the multiply-adds.

constexpr int kPanel = 8;  // output channels per panel: one AVX2 vector
constexpr int kMaxTileRows = 4;
constexpr int kGroupPanels = 4;  // panels a group takes: a one-row tile's

// Bytes ahead of the loop at which each panel is prefetched: from memory
// the hardware prefetcher alone does not keep a few panels' streams per
// thread fed (two threads over a 100 MB model's weights: 15-16 GB/s
// without, 17.6-18.7 GB/s with).
constexpr int64_t kPrefetchAhead = 4096;

using TileSums = float[kMaxTileRows][kGroupPanels * kPanel];

#if defined(__AVX2__) && defined(__FMA__)

#define ATTN_INT8_INLINE inline __attribute__((always_inline))

// Eight int8 weights to eight floats: vpmovsxbd, vcvtdq2ps.
inline __m256 LoadWeights(const int8_t* q) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q));
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
}

// acc[r][p] += W[panel p, k] x[r, k] for the R rows and P panels at w.
template <int R, int P>
ATTN_INT8_INLINE void PanelStep(const float* x, int64_t ldx, const int8_t* w, int64_t stride,
                                int64_t k, __m256 (&acc)[R][P]) {
  __m256 weights[P];
  for (int p = 0; p < P; ++p) weights[p] = LoadWeights(w + p * stride + kPanel * k);
  for (int r = 0; r < R; ++r) {
    const __m256 xr = _mm256_broadcast_ss(x + r * ldx + k);
    for (int p = 0; p < P; ++p) acc[r][p] = _mm256_fmadd_ps(weights[p], xr, acc[r][p]);
  }
}

// sums[r][column + j] for the R rows and the 8 P channels of P panels at w.
// The k loop runs eight steps per pass, fully unrolled, so that the steps
// address the panels at constant offsets and the pass's prefetch needs no
// test per step; tiles of fewer than four accumulators alternate between
// two sets of sums to keep enough multiply-adds in flight.
template <int R, int P>
ATTN_INT8_INLINE void PanelTile(const float* x, int64_t ldx, const int8_t* w, int64_t in,
                                TileSums& sums, int column) {
  constexpr int kSets = R * P >= 4 ? 1 : 2;
  const int64_t stride = kPanel * in;  // between panels
  __m256 acc[kSets][R][P];
  for (int s = 0; s < kSets; ++s) {
    for (int r = 0; r < R; ++r) {
      for (int p = 0; p < P; ++p) acc[s][r][p] = _mm256_setzero_ps();
    }
  }
  int64_t k = 0;
  for (; k + 8 <= in; k += 8) {  // 64 bytes of each panel
    for (int p = 0; p < P; ++p) {
      _mm_prefetch(reinterpret_cast<const char*>(w + p * stride + kPanel * k + kPrefetchAhead),
                   _MM_HINT_T0);
    }
#pragma GCC unroll 8
    for (int step = 0; step < 8; ++step) {
      PanelStep<R, P>(x, ldx, w, stride, k + step, acc[step % kSets]);
    }
  }
  for (; k < in; ++k) PanelStep<R, P>(x, ldx, w, stride, k, acc[0]);
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) {
      __m256 total = acc[0][r][p];
      for (int s = 1; s < kSets; ++s) total = _mm256_add_ps(total, acc[s][r][p]);
      _mm256_storeu_ps(&sums[r][column + p * kPanel], total);
    }
  }
}

#undef ATTN_INT8_INLINE

#else  // baseline: the same order of work in scalar lanes

template <int R, int P>
inline void PanelTile(const float* x, int64_t ldx, const int8_t* w, int64_t in, TileSums& sums,
                      int column) {
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < P * kPanel; ++j) sums[r][column + j] = 0.0f;
  }
  for (int64_t k = 0; k < in; ++k) {
    for (int p = 0; p < P; ++p) {
      const int8_t* weights = w + p * kPanel * in + kPanel * k;
      for (int r = 0; r < R; ++r) {
        const float xr = x[r * ldx + k];
        for (int j = 0; j < kPanel; ++j) {
          sums[r][column + p * kPanel + j] += static_cast<float>(weights[j]) * xr;
        }
      }
    }
  }
}

#endif

// R rows of the P panels at w, two panels per tile for R > 1.
template <int R, int P>
inline void RowsOfGroup(const float* x, int64_t ldx, const int8_t* w, int64_t in, TileSums& sums) {
  if constexpr (R == 1 || P <= 2) {
    PanelTile<R, P>(x, ldx, w, in, sums, 0);
  } else {
    PanelTile<R, 2>(x, ldx, w, in, sums, 0);
    PanelTile<R, P - 2>(x, ldx, w + 2 * kPanel * in, in, sums, 2 * kPanel);
  }
}

// Output channels [0, width) of the P panels at w, for every row; width <=
// P * kPanel (less only in the last panel).
template <int P>
inline void PanelGroup(const float* x, int64_t rows, int64_t ldx, const int8_t* w, int64_t in,
                       const float* scale, const float* bias, int64_t width, float* y,
                       int64_t ldy) {
  TileSums sums;
  for (int64_t r = 0; r < rows;) {
    const int64_t left = rows - r;
    const int tile = left >= 4 ? 4 : left >= 2 ? 2 : 1;
    if (tile == 4) {
      RowsOfGroup<4, P>(x + r * ldx, ldx, w, in, sums);
    } else if (tile == 2) {
      RowsOfGroup<2, P>(x + r * ldx, ldx, w, in, sums);
    } else {
      RowsOfGroup<1, P>(x + r * ldx, ldx, w, in, sums);
    }
    for (int i = 0; i < tile; ++i) {
      for (int64_t o = 0; o < width; ++o) {
        y[(r + i) * ldy + o] = scale[o] * sums[i][o] + (bias ? bias[o] : 0.0f);
      }
    }
    r += tile;
  }
}

// Panels [begin, end), in groups of kGroupPanels.
inline void RunPanels(int64_t begin, int64_t end, const float* x, int64_t rows, int64_t ldx,
                      const int8_t* panels, const float* scale, int64_t out, int64_t in,
                      const float* bias, float* y, int64_t ldy) {
  for (int64_t p = begin; p < end;) {
    const int64_t first = p * kPanel;
    const int count = end - p < kGroupPanels ? static_cast<int>(end - p) : kGroupPanels;
    const int64_t width = out - first < count * kPanel ? out - first : count * kPanel;
    const int8_t* w = panels + first * in;
    const float* b = bias ? bias + first : nullptr;
    switch (count) {
      case 4:
        PanelGroup<4>(x, rows, ldx, w, in, scale + first, b, width, y + first, ldy);
        break;
      case 3:
        PanelGroup<3>(x, rows, ldx, w, in, scale + first, b, width, y + first, ldy);
        break;
      case 2:
        PanelGroup<2>(x, rows, ldx, w, in, scale + first, b, width, y + first, ldy);
        break;
      default:
        PanelGroup<1>(x, rows, ldx, w, in, scale + first, b, width, y + first, ldy);
    }
    p += count;
  }
}
