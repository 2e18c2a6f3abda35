// Bf16 products: y = x W^T + b with W and x rounded to bfloat16 (the top 16
// bits of a float32: its sign, all 8 exponent bits and 7 of the 23 mantissa
// bits) and every multiply-add in float32.
//
// Why: a batch-1 decode step reads every weight once, so its time is the
// weights' bytes over the memory bandwidth, and bf16 weights are half of
// float32's, with float32's range and no scales to choose. A prefill or a
// batched step is bound by arithmetic instead, and there a CPU with AVX-512
// BF16 multiplies pairs of bf16 values natively (vdpbf16ps: 32 products per
// instruction, twice a float32 fused multiply-add's), but only of bf16
// operands: the activations are rounded to bf16 too, as that instruction
// and llama.cpp's BF16 type do. One function at every row count and on
// every path, so that a prompt's prefill and its decode steps compute each
// token alike: the product of two bf16 values is exact in float32, and
// each output's sum runs over k in pairs, the odd k of a pair and then the
// even one, each a float32 add: vdpbf16ps's order. Paths without it widen
// the bf16 values (exact) and run the same adds in the same order, so every
// path gives the same floats, bit for bit, apart from subnormal values
// (below about 1.2e-38), which vdpbf16ps takes as zero.
//
// Rounding is to nearest, ties to even, of finite values; a value beyond
// bf16's largest finite one (about 3.39e38) rounds to infinity, which
// callers refuse for weights.
//
// Each row's result depends on that row alone, in every tile shape: a
// stream's tokens do not change with the rows batched beside it.
//
// Layout: groups of kBf16GroupWidth (64) output channels; group g holds,
// for each pair of inputs (k, k + 1) with k even, the 64 pairs
// (W[64 g + j, k], W[64 g + j, k + 1]) (j = 0..63, zero past `out` and past
// `in`), contiguously: 256 bytes, four panels of kBf16PanelWidth (16)
// channels, each one 64-byte vector: vdpbf16ps's operand, or two 16-float
// vectors (the even and the odd k) after widening. At one row a thread
// reads its weights as one sequential stream.
#pragma once

#include <cstdint>
#include <vector>

#include "model/kernels/huge_pages.h"

namespace attn::kernels {

uint16_t RoundToBf16(float value);
float Bf16ToFloat(uint16_t value);

inline constexpr int64_t kBf16PanelWidth = 16;
inline constexpr int64_t kBf16GroupWidth = 64;

// W in Bf16Gemm's layout: out rounded up to 64, times in rounded up to 2;
// on huge pages (huge_pages.h).
struct Bf16Panels {
  std::vector<uint16_t, HugePageAllocator<uint16_t>> values;
};

// w [out, in] (bf16 values, row-major) into panels, and back.
Bf16Panels PackBf16Panels(const uint16_t* w, int64_t out, int64_t in);
void UnpackBf16Panels(const Bf16Panels& panels, int64_t out, int64_t in, uint16_t* w);

// The instruction sets Bf16Gemm can run; each CPU runs the best it has.
// kAvx512Bf16 multiplies natively (vdpbf16ps); the others widen.
enum class Bf16Path { kBaseline, kAvx2, kAvx512, kAvx512Bf16 };

// The path Bf16Gemm takes on this CPU, and whether the CPU can run `path`
// (kBaseline always).
Bf16Path Bf16GemmPath();
bool CpuRuns(Bf16Path path);
const char* Bf16PathName(Bf16Path path);

// Whether Bf16GemmPath() runs at least as fast as the packed float32
// product at every row count (the AVX-512 paths: 64 rows and prefills ran
// faster, docs/benchmarks-log.md "Bf16 activations, multiplied natively").
// The AVX2 and baseline paths run a row at a time and pay only at a few
// rows, where the product reads weights from memory.
bool Bf16GemmRunsEveryRowCount();

// y[r, :out] = bf16(x[r, :in]) W^T + bias for r < rows; x and y are float32
// rows with the given row strides, bias [out] or null. Parallelises over
// groups of panels when the product is large enough to pay for a fork.
void Bf16Gemm(const float* x, int64_t rows, int64_t ldx, const Bf16Panels& panels, int64_t out,
              int64_t in, const float* bias, float* y, int64_t ldy);

// Bf16Gemm through `path`, which the CPU must run (CpuRuns): lets tests and
// benchmarks check every path a machine has.
void Bf16GemmOn(Bf16Path path, const float* x, int64_t rows, int64_t ldx, const Bf16Panels& panels,
                int64_t out, int64_t in, const float* bias, float* y, int64_t ldy);

}  // namespace attn::kernels
