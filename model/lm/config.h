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

// The norm the blocks of a whole-block kind (IsWholeBlock) are built
// with, which a model of that kind must name: RMSNorm for mamba2,
// LayerNorm for the RWKV kinds.
NormKind WholeBlockNorm(MixerKind kind);

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
  // The output head: the embedding transposed (tied), or a matrix of its
  // own (RWKV-7's released models have one).
  bool tie_embeddings = true;
  // rwkv7 only: the low-rank sizes (a zero: DefaultRwkv7Ranks(d_model)'s)
  // and the eps of each head's group norm. ff_hidden is its channel mix's
  // width, heads its head count (d_model / heads channels each), and its
  // norms are LayerNorms (norm must be layernorm).
  Rwkv7Ranks rwkv7_ranks{0, 0, 0, 0};
  double group_norm_eps = 64e-5;
  // rwkv4 only: Hugging Face's rescale_every (MixerOptions::rescale_every);
  // ff_hidden is its channel mix's width. Its norms are LayerNorms.
  int64_t rescale_every = 0;
  // mamba2 only: the state, convolution and inner sizes; heads is the
  // number of SSM heads (expand * d_model / heads channels each). Its norms
  // are RMSNorms; ff_hidden is unused.
  Mamba2Sizes mamba2;

  // The options every layer's mixer is built with (MixerOptions::layer 0;
  // the model sets each layer's index).
  MixerOptions mixer_options() const;
  // kInvalidArgument naming the first field out of range.
  absl::Status Validate() const;
  absl::Status ValidateMamba2() const;  // Validate's checks of the mamba2 sizes
  std::string ToJson() const;
  // Parses and validates; unknown keys are an error (a typo must not pass).
  static absl::StatusOr<LmConfig> FromJson(const std::string& json);
};

}  // namespace attn
