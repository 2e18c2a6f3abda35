#include "model/layers/feed_forward.h"

#include <torch/torch.h>

#include "model/kernels/kernels.h"
#include "model/layers/dense.h"

namespace attn {

FeedForwardImpl::FeedForwardImpl(int64_t d_model, int64_t hidden, FeedForwardKind kind)
    : kind_(kind) {
  const bool bias = kind == FeedForwardKind::kGelu;
  up_ = register_module("up",
                        torch::nn::Linear(torch::nn::LinearOptions(d_model, hidden).bias(bias)));
  down_ = register_module("down",
                          torch::nn::Linear(torch::nn::LinearOptions(hidden, d_model).bias(bias)));
  if (kind == FeedForwardKind::kSwiGlu) {
    gate_ = register_module(
        "gate", torch::nn::Linear(torch::nn::LinearOptions(d_model, hidden).bias(false)));
  }
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  if (kind_ == FeedForwardKind::kSwiGlu) {
    return Dense(torch::silu(Dense(x, gate_)) * Dense(x, up_), down_);
  }
  torch::Tensor hidden = Dense(x, up_);
  const bool tracked = torch::GradMode::is_enabled() && hidden.requires_grad();
  if (tracked || !hidden.device().is_cpu() || hidden.scalar_type() != torch::kFloat ||
      !hidden.is_contiguous()) {
    return Dense(torch::gelu(hidden), down_);
  }
  // `hidden` is a fresh tensor of this call: the fused GELU may overwrite it.
  kernels::GeluInPlace(hidden.numel(), hidden.data_ptr<float>());
  return Dense(hidden, down_);
}

}  // namespace attn
