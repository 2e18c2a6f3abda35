#include "model/layers/norms.h"

#include <torch/torch.h>

#include <cmath>

#include "model/kernels/kernels.h"

namespace attn {

NormImpl::NormImpl(NormKind kind, int64_t d_model, double eps) : kind_(kind), eps_(eps) {
  switch (kind) {
    case NormKind::kLayerNorm:
      gain_ = register_parameter("gain", torch::ones({d_model}));
      bias_ = register_parameter("bias", torch::zeros({d_model}));
      break;
    case NormKind::kScaleNorm:
      gain_ = register_parameter("gain", torch::full({1}, std::sqrt(static_cast<double>(d_model))));
      break;
    case NormKind::kRmsNorm:
      gain_ = register_parameter("gain", torch::ones({d_model}));
      break;
  }
}

bool NormImpl::CanFuse(const torch::Tensor& x) const {
  if (kind_ == NormKind::kLayerNorm || !x.device().is_cpu() || x.scalar_type() != torch::kFloat ||
      gain_.scalar_type() != torch::kFloat || !gain_.device().is_cpu()) {
    return false;
  }
  return !torch::GradMode::is_enabled() || !(x.requires_grad() || gain_.requires_grad());
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  if (CanFuse(x)) {
    auto in = x.contiguous();
    auto gain = gain_.contiguous();
    auto out = torch::empty_like(in);
    const int64_t d = in.size(-1), rows = d > 0 ? in.numel() / d : 0;
    if (kind_ == NormKind::kRmsNorm) {
      kernels::RmsNormRows(rows, d, in.data_ptr<float>(), gain.data_ptr<float>(),
                           static_cast<float>(eps_), out.data_ptr<float>());
    } else {
      kernels::ScaleNormRows(rows, d, in.data_ptr<float>(), gain.item<float>(),
                             static_cast<float>(eps_), out.data_ptr<float>());
    }
    return out;
  }
  switch (kind_) {
    case NormKind::kLayerNorm:
      return torch::layer_norm(x, {x.size(-1)}, gain_, bias_, eps_);
    case NormKind::kScaleNorm:
      return gain_ * x / x.norm(2, -1, /*keepdim=*/true).clamp_min(eps_);
    case NormKind::kRmsNorm:
      return gain_ * x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  }
  return x;
}

}  // namespace attn
