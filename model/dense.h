// Affine maps y = x W^T + b for the modules' projections.
//
// Why not torch::nn::Linear::forward everywhere: Linear always calls
// OpenBLAS's matrix-matrix product, which packs the whole weight matrix into
// its panel layout on every call. For the few rows of a decode step that
// copy costs as much as a large part of the product. Outside autograd, on
// float32 CPU tensors, Dense multiplies 1 to 256 rows (decode steps, prefill
// chunks) with a copy of the weight packed once (model/packed_gemm.h) and
// kept while the weight lives unchanged; a weight written in place (its
// version counter moves) is repacked. More rows, and every product autograd
// tracks, take Linear; one row of a weight that cannot be packed (an
// inference tensor) takes OpenBLAS's matrix-vector product.
//
// The packed copies cost as much memory again as the weights they copy.
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/types.h>

namespace attn {

// x [..., in], weight [out, in], bias [out] or undefined: [..., out].
torch::Tensor Dense(const torch::Tensor& x, const torch::Tensor& weight,
                    const torch::Tensor& bias = {});

inline torch::Tensor Dense(const torch::Tensor& x, const torch::nn::Linear& layer) {
  return Dense(x, layer->weight, layer->bias);
}

}  // namespace attn
