#include "model/layers/norm_kind.h"

#include <utility>

#include "util/enum_names.h"

namespace attn {

namespace {

constexpr std::pair<NormKind, const char*> kNormNames[] = {
    {NormKind::kLayerNorm, "layernorm"},
    {NormKind::kScaleNorm, "scalenorm"},
    {NormKind::kRmsNorm, "rmsnorm"},
};

constexpr std::pair<FeedForwardKind, const char*> kFeedForwardNames[] = {
    {FeedForwardKind::kGelu, "gelu"},
    {FeedForwardKind::kSwiGlu, "swiglu"},
};

}  // namespace

std::string NormKindName(NormKind kind) { return EnumName(kNormNames, kind); }

bool ParseNormKind(const std::string& name, NormKind* kind) {
  return ParseEnumName(kNormNames, name, kind);
}

std::string FeedForwardKindName(FeedForwardKind kind) { return EnumName(kFeedForwardNames, kind); }

bool ParseFeedForwardKind(const std::string& name, FeedForwardKind* kind) {
  return ParseEnumName(kFeedForwardNames, name, kind);
}

}  // namespace attn
