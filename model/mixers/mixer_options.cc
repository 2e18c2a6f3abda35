#include "model/mixers/mixer_options.h"

#include <algorithm>
#include <cmath>
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
    {MixerKind::kRwkv7, "rwkv7"},
    {MixerKind::kRwkv4, "rwkv4"},
    {MixerKind::kMamba2, "mamba2"},
    {MixerKind::kShortConv, "short-conv"},
    {MixerKind::kGqa, "gqa"},
};

// round(x / 32) * 32, at least 32; halves go to even as Python rounds them.
int64_t RankOf(double x) {
  return std::max<int64_t>(32, static_cast<int64_t>(std::nearbyint(x / 32.0)) * 32);
}

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

bool IsWholeBlock(MixerKind kind) {
  return kind == MixerKind::kRwkv7 || kind == MixerKind::kRwkv4 || kind == MixerKind::kMamba2;
}

Rwkv7Ranks DefaultRwkv7Ranks(int64_t d_model) {
  const double d = static_cast<double>(d_model);
  Rwkv7Ranks ranks;
  ranks.decay = RankOf(1.8 * std::sqrt(d));
  ranks.iclr = ranks.decay;
  ranks.value = RankOf(1.3 * std::sqrt(d));
  ranks.gate = RankOf(0.6 * std::pow(d, 0.8));
  return ranks;
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
