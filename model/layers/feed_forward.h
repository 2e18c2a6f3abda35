// The position-wise feed-forward network of a Transformer layer, of one of
// two kinds, x [..., d_model] -> [..., d_model]:
//
//   gelu    FF(x) = W_2 gelu(W_1 x + b_1) + b_2        (Vaswani et al. 2017,
//                                                      with GELU)
//   swiglu  FF(x) = W_down (silu(W_gate x) * W_up x)   (Shazeer 2020; no
//                                                      biases: LFM2, Llama)
//
// On CPU outside autograd the GELU runs fused in place on the hidden
// activations (kernels::GeluInPlace); elsewhere it is torch::gelu. Both give
// the same numbers within the kernel's stated error.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "model/layers/norm_kind.h"

namespace attn {

class FeedForwardImpl : public torch::nn::Module {
 public:
  // Children "up" and "down" (and "gate" for swiglu).
  FeedForwardImpl(int64_t d_model, int64_t hidden, FeedForwardKind kind = FeedForwardKind::kGelu);
  torch::Tensor forward(const torch::Tensor& x);
  // The projections, for a kernel that runs this network itself (gate:
  // swiglu's only).
  const torch::nn::Linear& up() const { return up_; }
  const torch::nn::Linear& down() const { return down_; }
  const torch::nn::Linear& gate() const { return gate_; }

 private:
  FeedForwardKind kind_;
  torch::nn::Linear up_{nullptr}, down_{nullptr}, gate_{nullptr};
};
TORCH_MODULE(FeedForward);

}  // namespace attn
