// The bf16 product's tiles for CPUs with AVX-512 (bf16_gemm.cc dispatches
// here). Compiled with -mavx512f -mavx512bw; holds only RunGroupAvx512 and
// what it inlines.
#include "model/kernels/bf16_tiles.h"

namespace attn::kernels::bf16_tiles {

// Six rows by four panels: 24 accumulators, the four panels' vectors and a
// broadcast in AVX-512's 32 registers.
void RunGroupAvx512(const Operands& op, int64_t group, int64_t count) {
  RunGroupWith<6, 4>(op, group, count);
}

}  // namespace attn::kernels::bf16_tiles
