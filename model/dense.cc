#include "model/dense.h"

#include <torch/torch.h>

namespace attn {

torch::Tensor Dense(const torch::Tensor& x, const torch::Tensor& weight,
                    const torch::Tensor& bias) {
  const bool one_row = x.dim() >= 1 && x.numel() == x.size(-1);
  const bool tracked =
      torch::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad());
  if (!one_row || tracked) return torch::nn::functional::linear(x, weight, bias);
  auto sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  auto row = x.reshape({x.size(-1)});
  auto y = bias.defined() ? torch::addmv(bias, weight, row) : torch::mv(weight, row);
  return y.view(sizes);
}

}  // namespace attn
