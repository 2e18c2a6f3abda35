// Internal to int8_gemm.cc and int8_gemm_avx2.cc: the loops of Int8Gemm,
// compiled twice, once for baseline x86-64 and once with -mavx2 -mfma (the
// runtime picks one, int8_gemm.cc). Each includer wraps this file in its own
// namespace and includes <cstdint>, <cstring> (and <immintrin.h> for AVX2)
// first; the file itself includes nothing and instantiates no
// standard-library template, so no code compiled for AVX2 can be merged into
// a function that other CPUs run.
//
// DotBlock<R, O> computes sums[r][o] = sum_k Q[o, k] x[r, k] for R <= 2 rows
// of x and O <= 4 rows of Q: R * O independent accumulators, each weight
// converted to float once for the R rows.

constexpr int kBlock = 4;  // output channels per block

#if defined(__AVX2__) && defined(__FMA__)

inline float Sum(__m256 v) {
  const __m128 pairs = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 two = _mm_add_ps(pairs, _mm_movehl_ps(pairs, pairs));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)));
}

// Eight int8 weights to eight floats: vpmovsxbd, vcvtdq2ps.
inline __m256 LoadWeights(const int8_t* q) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q));
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
}

template <int R, int O>
inline void DotBlock(const float* x, int64_t ldx, const int8_t* q, int64_t in,
                     float (&sums)[2][kBlock]) {
  __m256 acc[R][O];
  for (int r = 0; r < R; ++r) {
    for (int o = 0; o < O; ++o) acc[r][o] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 8 <= in; k += 8) {
    __m256 w[O];
    for (int o = 0; o < O; ++o) w[o] = LoadWeights(q + o * in + k);
    for (int r = 0; r < R; ++r) {
      const __m256 xr = _mm256_loadu_ps(x + r * ldx + k);
      for (int o = 0; o < O; ++o) acc[r][o] = _mm256_fmadd_ps(w[o], xr, acc[r][o]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int o = 0; o < O; ++o) {
      float s = Sum(acc[r][o]);
      for (int64_t t = k; t < in; ++t) s += static_cast<float>(q[o * in + t]) * x[r * ldx + t];
      sums[r][o] = s;
    }
  }
}

#else  // baseline: four-way unrolled scalar chains

template <int R, int O>
inline void DotBlock(const float* x, int64_t ldx, const int8_t* q, int64_t in,
                     float (&sums)[2][kBlock]) {
  for (int r = 0; r < R; ++r) {
    for (int o = 0; o < O; ++o) {
      const int8_t* row = q + o * in;
      const float* xr = x + r * ldx;
      float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      int64_t k = 0;
      for (; k + 4 <= in; k += 4) {
        for (int j = 0; j < 4; ++j) s[j] += static_cast<float>(row[k + j]) * xr[k + j];
      }
      for (; k < in; ++k) s[0] += static_cast<float>(row[k]) * xr[k];
      sums[r][o] = (s[0] + s[1]) + (s[2] + s[3]);
    }
  }
}

#endif

// Output channels [0, O) of the block at q, scale, bias, y, for every row.
template <int O>
inline void OutputBlock(const float* x, int64_t rows, int64_t ldx, const int8_t* q,
                        const float* scale, int64_t in, const float* bias, float* y, int64_t ldy) {
  float sums[2][kBlock];
  for (int64_t r = 0; r < rows; r += 2) {
    const int pair = r + 1 < rows ? 2 : 1;
    if (pair == 2) {
      DotBlock<2, O>(x + r * ldx, ldx, q, in, sums);
    } else {
      DotBlock<1, O>(x + r * ldx, ldx, q, in, sums);
    }
    for (int i = 0; i < pair; ++i) {
      for (int o = 0; o < O; ++o) {
        y[(r + i) * ldy + o] = scale[o] * sums[i][o] + (bias ? bias[o] : 0.0f);
      }
    }
  }
}

// Blocks [begin, end) of kBlock output channels; the last may be partial.
inline void RunBlocks(int64_t begin, int64_t end, const float* x, int64_t rows, int64_t ldx,
                      const int8_t* q, const float* scale, int64_t out, int64_t in,
                      const float* bias, float* y, int64_t ldy) {
  for (int64_t block = begin; block < end; ++block) {
    const int64_t first = block * kBlock;
    if (first + kBlock <= out) {
      OutputBlock<kBlock>(x, rows, ldx, q + first * in, scale + first, in,
                          bias ? bias + first : nullptr, y + first, ldy);
      continue;
    }
    for (int64_t o = first; o < out; ++o) {
      OutputBlock<1>(x, rows, ldx, q + o * in, scale + o, in, bias ? bias + o : nullptr, y + o,
                     ldy);
    }
  }
}
