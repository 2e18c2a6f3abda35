// Which normalisation a model's blocks use, by name (model/layers/norms.h
// has the layers). No LibTorch here.
#pragma once

#include <string>

namespace attn {

enum class NormKind { kLayerNorm, kScaleNorm, kRmsNorm };

// "layernorm", "scalenorm", "rmsnorm".
std::string NormKindName(NormKind kind);
bool ParseNormKind(const std::string& name, NormKind* kind);

}  // namespace attn
