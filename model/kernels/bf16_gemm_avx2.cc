// The bf16 product's tiles for CPUs with AVX2 and FMA (bf16_gemm.cc
// dispatches here). Compiled with -mavx2 -mfma; holds only RunGroupAvx2 and
// what it inlines.
#include "model/kernels/bf16_tiles.h"

namespace attn::kernels::bf16_tiles {

// A 16-float vector is two AVX2 registers: two rows by two panels keep 8
// for accumulators, 4 for the panels' vectors and one for a broadcast of the
// 16 registers. One row takes the whole group at once (8 accumulators), so
// that it reads the group's weights in one pass; the sums run in the same
// order either way.
void RunGroupAvx2(const Operands& op, int64_t group, int64_t count) {
  if (op.rows == 1) {
    RunGroupWith<1, 4>(op, group, count);
  } else {
    RunGroupWith<2, 2>(op, group, count);
  }
}

}  // namespace attn::kernels::bf16_tiles
