// Weight-only int8: y = x W^T + b with W stored as int8 and one float scale
// per output channel, activations and accumulation in float32.
//
// Why: a batch-1 decode step reads every weight once, so its time is the
// weights' bytes over the memory bandwidth. Stored as int8 they are a
// quarter of the float32 bytes. The product converts each int8 weight to
// float in registers (AVX2: eight at a time) and multiplies it with the
// float activations; nothing is rounded but the weights.
//
// Quantisation is symmetric per output channel:
//
//   scale_o = max_k |W[o, k]| / 127     (1 for an all-zero row),
//   Q[o, k] = round(W[o, k] / scale_o)  in [-127, 127],
//
// so |W[o, k] - scale_o Q[o, k]| <= scale_o / 2, and the product is
//
//   y[r, o] = scale_o * sum_k Q[o, k] x[r, k] + b_o,
//
// exact up to float32 accumulation against the same sum in float64 over the
// dequantised weights scale_o Q[o, k].
//
// Layout: QuantizeRows writes Q row-major [out, in]. Int8Gemm reads it in
// panels of kInt8PanelWidth output channels (PackInt8Panels): panel p holds,
// for k = 0..in-1, the values Q[8p + j, k] (j = 0..7, zero past `out`)
// contiguously, so that one vector load serves eight output channels and
// the product needs no sums across vector lanes. scale is [out]; x and y
// are float32 rows with the given row strides.
#pragma once

#include <cstdint>

namespace attn::kernels {

// Quantises w [out, in] (row stride ldw) into q [out, in] and scale [out].
// Non-finite weights are the caller's to refuse: they make a row's scale
// infinite or NaN.
void QuantizeRows(const float* w, int64_t out, int64_t in, int64_t ldw, int8_t* q, float* scale);

inline constexpr int64_t kInt8PanelWidth = 8;

// Bytes of the panel layout of an [out, in] matrix: out rounded up to whole
// panels, times in.
int64_t Int8PanelBytes(int64_t out, int64_t in);

// Q [out, in] (row-major) into panels (Int8PanelBytes bytes), and back.
void PackInt8Panels(const int8_t* q, int64_t out, int64_t in, int8_t* panels);
void UnpackInt8Panels(const int8_t* panels, int64_t out, int64_t in, int8_t* q);

// y[r, :out] = x[r, :in] (diag(scale) Q)^T + bias for r < rows, with Q in
// panels (PackInt8Panels). bias is [out] or null. Parallelises over panels
// when the product is large enough to pay for a fork. Meant for the rows of
// a decode step: each tile of four rows converts the weights again, so for
// many rows (a long prefill) a float GEMM of the dequantised weights, which
// is cache-blocked, is as fast.
void Int8Gemm(const float* x, int64_t rows, int64_t ldx, const int8_t* panels, const float* scale,
              int64_t out, int64_t in, const float* bias, float* y, int64_t ldy);

// Whether Int8Gemm runs its AVX2+FMA loops on this CPU (else a baseline
// x86-64 loop, several times slower).
bool Int8GemmUsesAvx2();

// Int8Gemm through the baseline loops whatever the CPU: what CPUs without
// AVX2 run, so that tests on any machine check those loops too.
void Int8GemmBaseline(const float* x, int64_t rows, int64_t ldx, const int8_t* panels,
                      const float* scale, int64_t out, int64_t in, const float* bias, float* y,
                      int64_t ldy);

}  // namespace attn::kernels
