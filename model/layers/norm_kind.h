// Which normalisation and which feed-forward a model's blocks use, by name
// (model/layers/norms.h and feed_forward.h have the layers). No LibTorch
// here.
#pragma once

#include <string>

namespace attn {

enum class NormKind { kLayerNorm, kScaleNorm, kRmsNorm };

// "layernorm", "scalenorm", "rmsnorm".
std::string NormKindName(NormKind kind);
bool ParseNormKind(const std::string& name, NormKind* kind);

enum class FeedForwardKind { kGelu, kSwiGlu };

// "gelu", "swiglu".
std::string FeedForwardKindName(FeedForwardKind kind);
bool ParseFeedForwardKind(const std::string& name, FeedForwardKind* kind);

}  // namespace attn
