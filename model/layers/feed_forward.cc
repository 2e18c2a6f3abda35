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

namespace {

// Whether the fused CPU kernels may overwrite `hidden`, a fresh product of
// this layer's: a contiguous float32 CPU tensor that autograd does not track.
bool FusableInPlace(const torch::Tensor& hidden) {
  return !(torch::GradMode::is_enabled() && hidden.requires_grad()) && hidden.device().is_cpu() &&
         hidden.scalar_type() == torch::kFloat && hidden.is_contiguous();
}

}  // namespace

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  if (kind_ == FeedForwardKind::kSwiGlu) {
    torch::Tensor gate = Dense(x, gate_), up = Dense(x, up_);
    if (!FusableInPlace(gate) || !FusableInPlace(up)) {
      return Dense(torch::silu(gate) * up, down_);
    }
    kernels::SiluMulInPlace(gate.numel(), gate.data_ptr<float>(), up.data_ptr<float>());
    return Dense(gate, down_);
  }
  torch::Tensor hidden = Dense(x, up_);
  if (!FusableInPlace(hidden)) return Dense(torch::gelu(hidden), down_);
  kernels::GeluInPlace(hidden.numel(), hidden.data_ptr<float>());
  return Dense(hidden, down_);
}

}  // namespace attn
