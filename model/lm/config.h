// The configuration of a causal language model (model/lm/language_model.h):
// its sizes, mixer, norm and positions. A package stores it as JSON.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/layers/norm_kind.h"
#include "model/mixers/mixer_options.h"

namespace attn {

enum class PositionKind { kNone, kSinusoidal, kLearned };

std::string PositionKindName(PositionKind kind);  // "none", "sinusoidal", "learned"
bool ParsePositionKind(const std::string& name, PositionKind* kind);

struct LmConfig {
  int64_t vocab_size = 4096;
  int64_t d_model = 256;
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t ff_hidden = 1024;
  MixerKind mixer = MixerKind::kAftConv;
  NormKind norm = NormKind::kRmsNorm;
  PositionKind positions = PositionKind::kNone;
  int64_t window = 32;         // aft-local, aft-conv, aft-decay
  int64_t max_context = 2048;  // mixers with a cache or absolute bias; learned positions
  int64_t chunk = 0;           // blocks of the parallel forms; 0: DefaultChunk(mixer)

  // The options every layer's mixer is built with.
  MixerOptions mixer_options() const;
  // kInvalidArgument naming the first field out of range.
  absl::Status Validate() const;
  std::string ToJson() const;
  // Parses and validates; unknown keys are an error (a typo must not pass).
  static absl::StatusOr<LmConfig> FromJson(const std::string& json);
};

}  // namespace attn
