// y = x W^T + b on a weight matrix packed once, for the few rows of a
// decode step.
//
// Why: OpenBLAS packs the whole weight matrix into its own panel layout on
// every sgemm call. At the 2 to 64 rows of a batched decode step that copy
// costs about a third of the product (perf: sgemm_incopy at 18% of a 64-row
// step against 31% in the multiply kernel). Here the weight is laid out once
// in that panel order and the product streams it directly: each panel of 32
// output features is read from cache once per tile of rows, and each row's
// inputs are broadcast against it, so no reduction across lanes is needed.
//
// Layout: panel p holds, for k = 0..in-1, the 32 weights W[32p + j, k]
// (j = 0..31, zero beyond `out`), contiguously. All pointers are float32;
// rows are contiguous with the given row strides.
#pragma once

#include <cstdint>

namespace attn::kernels {

inline constexpr int64_t kPanelWidth = 32;

// Floats PackWeight writes for a weight of [out, in].
int64_t PackedWeightSize(int64_t out, int64_t in);

// Packs w [out, in] (row stride ldw) into `packed` (PackedWeightSize floats).
void PackWeight(const float* w, int64_t out, int64_t in, int64_t ldw, float* packed);

// The instruction-set paths PackedGemm can take:
// - kVectorTiles: tiles of 12 rows by a whole panel on GCC's 16-float vector
//   types, compiled for AVX-512, AVX2 and baseline x86-64 (the loader picks
//   what the CPU has). Its 24 vectors of sums need AVX-512's 32 registers;
//   elsewhere they spill on every step (an AVX-only EPYC: 3 GFLOP/s, 60x
//   slower than OpenBLAS).
// - kAvx2: tiles of 3 rows by a whole panel in AVX2 intrinsics, for CPUs
//   with AVX2 and FMA but not AVX-512 (packed_gemm_avx2.cc).
enum class PackedPath { kVectorTiles, kAvx2 };

// The path PackedGemm takes here: kVectorTiles with AVX-512, kAvx2 with AVX2
// and FMA only, else kVectorTiles (slow: see PackedGemmIsFast). Whether the
// CPU can run `path`; its name in benchmark output.
PackedPath PackedGemmPath();
bool CpuRuns(PackedPath path);
const char* PackedPathName(PackedPath path);

// Whether PackedGemm beats LibTorch's product (OpenBLAS) here: with AVX-512
// or AVX2 and FMA. On older CPUs callers use LibTorch's product instead.
bool PackedGemmIsFast();

// y[r, :out] = x[r, :in] W^T + bias for r < rows. bias is [out] or null.
// Parallelises over panels and tiles of rows when the product is large
// enough to pay for a fork. Rows a multiple of 4 KiB apart are read from a
// copy spread a cache line further apart, in a buffer the calling thread
// keeps (at most 8 MiB; packed_gemm.cc says why).
void PackedGemm(const float* x, int64_t rows, int64_t ldx, const float* packed, int64_t out,
                int64_t in, const float* bias, float* y, int64_t ldy);

// PackedGemm through `path`, which the CPU must run (CpuRuns): lets tests
// and benchmarks check every path a machine has.
void PackedGemmOn(PackedPath path, const float* x, int64_t rows, int64_t ldx, const float* packed,
                  int64_t out, int64_t in, const float* bias, float* y, int64_t ldy);

}  // namespace attn::kernels
