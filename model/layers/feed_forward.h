// The position-wise feed-forward network of a Transformer layer (Vaswani
// et al. 2017, with GELU as in most current models):
//
//   FF(x) = W_2 gelu(W_1 x + b_1) + b_2,   x [..., d_model] -> [..., d_model]
//
// On CPU outside autograd the GELU runs fused in place on the hidden
// activations (kernels::GeluInPlace); elsewhere it is torch::gelu. Both give
// the same numbers within the kernel's stated error.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

namespace attn {

class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(int64_t d_model, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Linear up_{nullptr}, down_{nullptr};
};
TORCH_MODULE(FeedForward);

}  // namespace attn
