// Int8 products: y = x W^T + b with W stored as int8 with one float scale
// per output channel, and each row of x rounded to int8 with one scale of
// its own on the way in, so that the products are int8 by int8 with int32
// sums (as llama.cpp's Q8_0 does, with per-row instead of per-block scales).
//
// Why: a batch-1 decode step reads every weight once, so its time is the
// weights' bytes over the memory bandwidth, and int8 weights are a quarter
// of float32's. At many rows (a server's batched step, a prefill) the
// product is bound by arithmetic instead: int8 by int8 does four
// multiply-adds where float32 does one (AVX-512 VNNI's vpdpbusd: 64 per
// instruction; AVX2's vpmaddubsw and vpmaddwd: 32 per pair). Converting the
// weights to float for every tile of rows, as a weight-only product must,
// made 64 rows of int8 slower than 64 of float32.
//
// Quantisation is symmetric. Weights, per output channel o:
//
//   s_o = max_k |W[o, k]| / 127     (1 for an all-zero row),
//   Q[o, k] = round(W[o, k] / s_o)  in [-127, 127];
//
// activations, per row r, at every call:
//
//   t_r = max_k |x[r, k]| / 127,
//   A[r, k] = round(x[r, k] / t_r)  in [-127, 127]  (0 for an all-zero row);
//
// and the product is
//
//   y[r, o] = t_r s_o sum_k A[r, k] Q[o, k] + b_o,
//
// with the integer sum exact (int32; `in` at most kInt8MaxIn), so the only
// float rounding after the two quantisations is of that last line. A row
// of x holding an infinity or NaN gives a row of NaN. Each row's result
// depends on that row alone: a stream's tokens do not change with the rows
// batched beside it.
//
// Layout: QuantizeRows writes Q row-major [out, in]. Int8Gemm reads it in
// panels of kInt8PanelWidth (16) output channels with `in` rounded up to a
// multiple of four: panel p holds, for each group g of four inputs, the 16
// channels' four values in turn (byte 64 g + 4 j + i is Q[16 p + j, 4 g + i],
// zero past `out` and `in`), one 64-byte vector that vpdpbusd multiplies
// with a row's four activations broadcast to every lane. Each channel's sum
// of Q (Int8Panels::column_sums) corrects the +128 offset that vpdpbusd's
// unsigned operand needs.
#pragma once

#include <cstdint>
#include <vector>

#include "model/kernels/huge_pages.h"

namespace attn::kernels {

// Quantises w [out, in] (row stride ldw) into q [out, in] and scale [out].
// Non-finite weights are the caller's to refuse: they make a row's scale
// infinite or NaN.
void QuantizeRows(const float* w, int64_t out, int64_t in, int64_t ldw, int8_t* q, float* scale);

inline constexpr int64_t kInt8PanelWidth = 16;

// The widest input Int8Gemm takes: int32 sums of `in` products of up to
// 255 x 127 (vpdpbusd's offset operand) stay exact below 66,311 terms.
inline constexpr int64_t kInt8MaxIn = 65536;

// Q in Int8Gemm's panel layout, with each output channel's sum of Q.
struct Int8Panels {
  // out rounded up to 16, times in rounded up to 4; on huge pages (huge_pages.h)
  std::vector<int8_t, HugePageAllocator<int8_t>> values;
  std::vector<int32_t> column_sums;  // [out rounded up to 16], zero past out
};

// Q [out, in] (row-major) into panels, and back.
Int8Panels PackInt8Panels(const int8_t* q, int64_t out, int64_t in);
void UnpackInt8Panels(const Int8Panels& panels, int64_t out, int64_t in, int8_t* q);

// The instruction sets Int8Gemm can run; each CPU runs the best it has.
enum class Int8Path { kBaseline, kAvx2, kAvx512Vnni };

// The path Int8Gemm takes on this CPU, and whether the CPU can run `path`
// (kBaseline always).
Int8Path Int8GemmPath();
bool CpuRuns(Int8Path path);
const char* Int8PathName(Int8Path path);

// y[r, :out] = the product above for r < rows; x and y are float32 rows
// with the given row strides, bias [out] or null, in <= kInt8MaxIn.
// Parallelises over panels when the product is large enough to pay for a
// fork.
void Int8Gemm(const float* x, int64_t rows, int64_t ldx, const Int8Panels& panels,
              const float* scale, int64_t out, int64_t in, const float* bias, float* y,
              int64_t ldy);

// Int8Gemm through `path`, which the CPU must run (CpuRuns): lets tests and
// benchmarks check every path a machine has.
void Int8GemmOn(Int8Path path, const float* x, int64_t rows, int64_t ldx, const Int8Panels& panels,
                const float* scale, int64_t out, int64_t in, const float* bias, float* y,
                int64_t ldy);

// The activation quantisation above, exposed for the tests' references:
// a [rows, in] (row stride in) and t [rows]; t_r is NaN for a row holding
// a non-finite value.
void QuantizeActivations(const float* x, int64_t rows, int64_t ldx, int64_t in, int8_t* a,
                         float* t);

}  // namespace attn::kernels
