// Int8Gemm's loops for CPUs with AVX2 and FMA (int8_gemm.cc dispatches
// here). This file is compiled with -mavx2 -mfma (CMakeLists.txt); it must
// stay free of anything a CPU without them could end up running: only the
// loops of int8_gemm_body.h, reached through RunPanelsAvx2.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace attn::kernels {
namespace int8_avx2 {
#include "model/kernels/int8_gemm_body.h"
}  // namespace int8_avx2

void RunPanelsAvx2(int64_t begin, int64_t end, const float* x, int64_t rows, int64_t ldx,
                   const int8_t* panels, const float* scale, int64_t out, int64_t in,
                   const float* bias, float* y, int64_t ldy) {
  int8_avx2::RunPanels(begin, end, x, rows, ldx, panels, scale, out, in, bias, y, ldy);
}

}  // namespace attn::kernels
