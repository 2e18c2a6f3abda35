// The bf16 product's tiles for CPUs with AVX-512 BF16 (bf16_gemm.cc
// dispatches here): bf16_tiles.h's loops with vdpbf16ps as each pair's
// multiply-add. Compiled with -mavx512f -mavx512bw -mavx512bf16; holds only
// RunGroupAvx512Bf16 and what it inlines.
#include "model/kernels/bf16_tiles.h"

namespace attn::kernels::bf16_tiles {

// Six rows by four panels: 24 accumulators, the four panels' vectors and a
// broadcast pair in AVX-512's 32 registers.
void RunGroupAvx512Bf16(const Operands& op, int64_t group, int64_t count) {
  RunGroupWith<6, 4>(op, group, count);
}

}  // namespace attn::kernels::bf16_tiles
