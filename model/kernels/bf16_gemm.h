// Bf16 products: y = x W^T + b with W stored as bfloat16 (the top 16 bits
// of a float32: its sign, all 8 exponent bits and 7 of the 23 mantissa
// bits) and x, y and every multiply-add in float32.
//
// Why: a batch-1 decode step reads every weight once, so its time is the
// weights' bytes over the memory bandwidth, and bf16 weights are half of
// float32's, with float32's range and no scales to choose. Widening a bf16
// to the float32 it stands for is exact (a zero-extend and a shift), so
// the product is the float32 product of the rounded weights: only the
// weights' one rounding separates it from float32, activations stay float32
// (AVX-512 BF16's vdpbf16ps would round them to bf16 too), and the float
// paths that multiply the rounded weights (autograd, exported TorchScript)
// compute the same function. In a batched step each widened weight vector
// serves a tile of rows, so the conversion costs little there either.
//
// Rounding is to nearest, ties to even, of finite values; a value beyond
// bf16's largest finite one (about 3.39e38) rounds to infinity, which
// callers refuse.
//
// Each row's result depends on that row alone, and on one instruction-set
// path its sums run in the same order for every row count: a prompt's
// prefill and its decode steps compute each token's products alike, and a
// stream's tokens do not change with the rows batched beside it.
//
// Layout: groups of kBf16GroupWidth (64) output channels; group g holds,
// for k = 0..in-1, the 64 values W[64 g + j, k] (j = 0..63, zero past
// `out`), contiguously: 128 bytes, four panels of kBf16PanelWidth (16)
// channels that each widen to one 16-float vector. At one row a thread
// reads its weights as one sequential stream. (Four streams, a panel each,
// measured the same on the 0.4B RWKV-7 shape: five alternating pairs of
// runs, median ratio 1.03x within a spread of 0.93-1.10x.)
#pragma once

#include <cstdint>
#include <vector>

#include "model/kernels/huge_pages.h"

namespace attn::kernels {

uint16_t RoundToBf16(float value);
float Bf16ToFloat(uint16_t value);

inline constexpr int64_t kBf16PanelWidth = 16;
inline constexpr int64_t kBf16GroupWidth = 64;

// W in Bf16Gemm's layout: out rounded up to 64, times in; on huge pages
// (huge_pages.h).
struct Bf16Panels {
  std::vector<uint16_t, HugePageAllocator<uint16_t>> values;
};

// w [out, in] (bf16 values, row-major) into panels, and back.
Bf16Panels PackBf16Panels(const uint16_t* w, int64_t out, int64_t in);
void UnpackBf16Panels(const Bf16Panels& panels, int64_t out, int64_t in, uint16_t* w);

// The instruction sets Bf16Gemm can run; each CPU runs the best it has.
enum class Bf16Path { kBaseline, kAvx2, kAvx512 };

// The path Bf16Gemm takes on this CPU, and whether the CPU can run `path`
// (kBaseline always).
Bf16Path Bf16GemmPath();
bool CpuRuns(Bf16Path path);
const char* Bf16PathName(Bf16Path path);

// y[r, :out] = x[r, :in] W^T + bias for r < rows; x and y are float32 rows
// with the given row strides, bias [out] or null. Parallelises over panels
// when the product is large enough to pay for a fork.
void Bf16Gemm(const float* x, int64_t rows, int64_t ldx, const Bf16Panels& panels, int64_t out,
              int64_t in, const float* bias, float* y, int64_t ldy);

// Bf16Gemm through `path`, which the CPU must run (CpuRuns): lets tests and
// benchmarks check every path a machine has.
void Bf16GemmOn(Bf16Path path, const float* x, int64_t rows, int64_t ldx, const Bf16Panels& panels,
                int64_t out, int64_t in, const float* bias, float* y, int64_t ldy);

}  // namespace attn::kernels
