// Normalisation layers over the last dimension d of x:
//
//   LayerNorm  (Ba et al. 2016):        y = g * (x - mean(x)) / sqrt(var(x) + eps) + b
//   ScaleNorm  (Nguyen & Salazar 2019): y = g * x / max(||x||_2, eps), g scalar, init sqrt(d)
//   RMSNorm    (Zhang & Sennrich 2019): y = g * x / sqrt(mean(x^2) + eps)
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <string>

#include "model/layers/norm_kind.h"

namespace attn {

class NormImpl : public torch::nn::Module {
 public:
  NormImpl(NormKind kind, int64_t d_model, double eps = 1e-5);
  torch::Tensor forward(const torch::Tensor& x);
  NormKind kind() const { return kind_; }

 private:
  // The fused CPU loop (model/kernels/kernels.h) outside autograd; LayerNorm is
  // already one fused LibTorch op.
  bool CanFuse(const torch::Tensor& x) const;

  NormKind kind_;
  double eps_;
  torch::Tensor gain_;  // [d] (scalar [1] for ScaleNorm)
  torch::Tensor bias_;  // [d], LayerNorm only
};
TORCH_MODULE(Norm);

}  // namespace attn
