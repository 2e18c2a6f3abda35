#include "model/norms.h"

#include <torch/torch.h>

#include <cmath>

#include "model/enum_names.h"

namespace attn {

namespace {

constexpr std::pair<NormKind, const char*> kNormNames[] = {
    {NormKind::kLayerNorm, "layernorm"},
    {NormKind::kScaleNorm, "scalenorm"},
    {NormKind::kRmsNorm, "rmsnorm"},
};

}  // namespace

std::string NormKindName(NormKind kind) { return EnumName(kNormNames, kind); }

bool ParseNormKind(const std::string& name, NormKind* kind) {
  return ParseEnumName(kNormNames, name, kind);
}

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

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
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
