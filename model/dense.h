// Affine maps y = x W^T + b for the modules' projections.
//
// Why not torch::nn::Linear::forward everywhere: Linear always calls a
// matrix-matrix product, and OpenBLAS packs the whole weight matrix on every
// such call. For a decode step at batch 1 the packing costs more than the
// product (a 4096 x 160 head: ~340 us as a GEMM, ~70 us as a matrix-vector
// product here). Dense takes the matrix-vector route for one row outside
// autograd and is Linear itself otherwise.
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
