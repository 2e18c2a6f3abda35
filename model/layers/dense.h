// Affine maps y = x W^T + b for the modules' projections.
//
// Why not torch::nn::Linear::forward everywhere: Linear always calls
// OpenBLAS's matrix-matrix product, which packs the whole weight matrix into
// its panel layout on every call. For the few rows of a decode step that
// copy costs as much as a large part of the product. Outside autograd, on
// float32 CPU tensors, Dense multiplies 1 to 256 rows (decode steps, prefill
// chunks) with a copy of the weight packed once (model/kernels/packed_gemm.h) and
// kept while the weight lives unchanged; a weight written in place (its
// version counter moves) is repacked. More rows, and every product autograd
// tracks, take Linear; one row of a weight that cannot be packed (an
// inference tensor) takes OpenBLAS's matrix-vector product. The packed
// product is used only where it is fast (AVX-512, or AVX2 with FMA, each
// with tiles of its own); on older CPUs 1 to 6 rows take the matrix-vector
// product row by row, which beats OpenBLAS's matrix product for so few
// rows, and more rows take Linear.
//
// The packed copies cost as much memory again as the weights they copy.
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>

namespace attn {

// Dense multiplies float32 weights on the CPU through the packed product
// (model/kernels/packed_gemm.h), at most this many rows at a time: more
// run in slices of this many, one after the other.
inline constexpr int64_t kDensePackedMaxRows = 256;

// x [..., in], weight [out, in], bias [out] or undefined: [..., out].
torch::Tensor Dense(const torch::Tensor& x, const torch::Tensor& weight,
                    const torch::Tensor& bias = {});

inline torch::Tensor Dense(const torch::Tensor& x, const torch::nn::Linear& layer) {
  return Dense(x, layer->weight, layer->bias);
}

// Int8 for `weight` [out, in], a float32 CPU parameter
// (model/kernels/int8_gemm.h: symmetric, one scale per output channel, and
// each row of activations rounded to int8 at every product). Writes the
// dequantised values back into `weight`, so that the paths that multiply
// floats (autograd, an exported package's TorchScript methods, a weight
// wider than kernels::kInt8MaxIn) compute with the same weights, and keeps
// the int8 copy, which Dense multiplies for every row count: decode steps
// read a quarter of the bytes, and batched steps and prefills multiply
// int8 by int8. Those float paths differ from Dense's only by the
// activations' rounding.
// Writing `weight` again later (its version counter moves) drops the int8
// copy; a weight that still has one keeps it. Returns the int8 copy's bytes
// (weights and scales).
int64_t QuantizeWeightInt8(const torch::Tensor& weight);

// An int8 weight as stored in an int8 model package: values int8 [out, in]
// and scales float32 [out]; the weight is scales[o] * values[o, k].
struct Int8Matrix {
  torch::Tensor values;
  torch::Tensor scales;
};

// Makes `matrix` the int8 copy of `weight` (a float32 CPU parameter of the
// same [out, in]) and writes its dequantised values into `weight`, as
// QuantizeWeightInt8 does with the values it computes: loading an int8
// package installs exactly the int8 weights that were saved. Throws
// c10::Error naming the problem when the shapes or types disagree or a scale
// is negative or not finite. Returns the int8 copy's bytes.
int64_t SetInt8Copy(const torch::Tensor& weight, const Int8Matrix& matrix);

// A copy of `weight`'s int8 values and scales, or nullopt when Dense would
// not multiply it through an int8 copy.
std::optional<Int8Matrix> Int8CopyOf(const torch::Tensor& weight);

// Whether Dense would multiply `weight` through its int8 copy.
bool HasInt8Copy(const torch::Tensor& weight);

// How Dense multiplies a weight's bf16 copy by activations rounded to bf16.
enum class Bf16Product {
  // A CPU weight's copy is packed for the kernels of model/kernels/bf16_gemm.h
  // (float32 sums and outputs); another device's (a GPU's) is a bf16 tensor
  // there, multiplied by LibTorch's bf16 matrix product (cuBLAS: float32
  // sums, outputs rounded to bf16, then widened and the bias added in
  // float32), as bf16 inference on a GPU runs.
  kForDevice,
  // LibTorch's bf16 product on every device: on a CPU it checks the GPU's
  // arithmetic without a GPU.
  kLibTorch,
};

// Bf16 for `weight` [out, in], a float32 parameter: rounds each value to
// bf16 (to nearest, ties to even), writes the rounded values back into
// `weight`, so that every float path computes with the same weights, and
// keeps a bf16 copy that Dense multiplies by the activations rounded to
// bf16 (`product` says how): on a CPU with the kernels, at every row count
// with AVX-512, else at 1 to 6 rows, where a step is bound by reading the
// weights and reads half the bytes. More rows there take the float paths on
// the rounded weights and rounded activations, which differ from the bf16
// product only in the order of the sums. (Autograd, when a tensor requires
// grad, multiplies unrounded activations.) The float32 weights stay too, for
// those paths: the copy adds half their bytes, unless DropFloatValues frees
// them.
// Writing `weight` again later drops the bf16 copy; a weight that still has
// one keeps it. Throws c10::Error when a value is not finite or rounds to
// infinity (beyond about 3.39e38). Returns the bf16 copy's bytes.
int64_t QuantizeWeightBf16(const torch::Tensor& weight,
                           Bf16Product product = Bf16Product::kForDevice);

// Makes `weight`, which has a bf16 copy for LibTorch's product, that copy:
// the parameter holds the bf16 values from then on and its float32 values'
// memory is freed. Only for weights that nothing but Dense multiplies,
// outside autograd (a GPU model's projections, embedding and head): the
// float32 values would otherwise take twice the copy's memory and feed no
// product. Throws c10::Error for a weight without such a copy. Returns the
// bytes freed.
int64_t DropFloatValues(const torch::Tensor& weight);

// Whether Dense would multiply `weight` through its bf16 copy (at the row
// counts above).
bool HasBf16Copy(const torch::Tensor& weight);

// Dense(x, layer) for x [B, C, in] where the first `leading` outputs are
// wanted only for the last `keep` tokens of each sequence: a fused
// [q | k | v] projection in the last layer of a prefill, whose queries only
// the tokens that still need an output read. Elsewhere those columns are
// unspecified. That saves a third of the projection for every token whose
// output the prefill drops: 1.5-3% of the bundled models' 512-token
// prefill (alternating runs in one process). Takes the packed path only when
// `leading` is a whole number of the packed product's panels and the
// product would be packed; else it computes every column, as Dense does.
torch::Tensor DenseLeadingColumnsForLast(const torch::Tensor& x, const torch::nn::Linear& layer,
                                         int64_t leading, int64_t keep);

}  // namespace attn
