#include "model/mixers/mixer_options.h"

#include <utility>

#include "util/enum_names.h"

namespace attn {
namespace {

constexpr std::pair<MixerKind, const char*> kKindNames[] = {
    {MixerKind::kMha, "mha"},
    {MixerKind::kMhaAlibi, "mha-alibi"},
    {MixerKind::kRelative, "relative"},
    {MixerKind::kLinearElu, "linear-elu"},
    {MixerKind::kLinearExp, "linear-exp"},
    {MixerKind::kLinearDecay, "linear-decay"},
    {MixerKind::kAftFull, "aft-full"},
    {MixerKind::kAftLocal, "aft-local"},
    {MixerKind::kAftSimple, "aft-simple"},
    {MixerKind::kAftConv, "aft-conv"},
    {MixerKind::kAftDecay, "aft-decay"},
};

}  // namespace

std::string MixerKindName(MixerKind kind) { return EnumName(kKindNames, kind); }

bool ParseMixerKind(const std::string& name, MixerKind* kind) {
  return ParseEnumName(kKindNames, name, kind);
}

const std::vector<MixerKind>& AllMixerKinds() {
  static const auto* kinds = [] {
    auto* all = new std::vector<MixerKind>;
    for (const auto& entry : kKindNames) all->push_back(entry.first);
    return all;
  }();
  return *kinds;
}

int64_t DefaultChunk(MixerKind kind) {
  switch (kind) {
    case MixerKind::kAftFull:
    case MixerKind::kAftLocal:
    case MixerKind::kAftSimple:
    case MixerKind::kAftConv:
    case MixerKind::kAftDecay:
      return 16;
    default:
      return 64;
  }
}

}  // namespace attn
