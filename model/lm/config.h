// The configuration of a causal language model (model/lm/language_model.h):
// its sizes, mixer, norm and positions. A package stores it as JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
  // The feed-forward of a layer that is not a whole block, and the eps of
  // every norm the model builds (its layers' and the final one).
  FeedForwardKind ff = FeedForwardKind::kGelu;
  double norm_eps = 1e-5;
  // A hybrid (LFM2, Granite 4.0-H): the layers, in increasing order, whose
  // mixer is grouped-query attention (gqa) among those of `mixer`
  // (short-conv, or mamba2 with whole_block_ff). A gqa model's every layer
  // is one.
  std::vector<int64_t> attention_layers;
  // gqa layers: query heads (0: heads; a mamba2 hybrid's heads are its SSM
  // heads), key/value heads (0: the query heads), whether queries and keys
  // are rotated (false: no positions), the rotary base, and whether each
  // head's queries and keys pass an RMSNorm (of eps norm_eps).
  int64_t attention_heads = 0;
  int64_t kv_heads = 0;
  bool rope = true;
  double rope_theta = 10000.0;
  bool qk_norm = false;
  // mamba2 only: each block is followed by a norm and a feed-forward of
  // kind ff and width ff_hidden, as a MixerBlock's second half (Granite
  // 4.0-H's Mamba layers and their shared MLP).
  bool whole_block_ff = false;
  // A sparse mixture of SwiGLU experts (model/layers/mixture_of_experts.h)
  // beside every layer's feed-forward, which then reads the sum of both
  // (Granite 4.0-H Tiny and Small: the feed-forward is their shared
  // expert). experts 0: none.
  struct Moe {
    int64_t experts = 0;
    int64_t top_k = 0;
    int64_t hidden = 0;  // each expert's width
  } moe;
  // short-conv: the convolution's width.
  int64_t conv_kernel = 3;

  // The options every layer's mixer is built with (MixerOptions::layer 0;
  // the model sets each layer's index).
  MixerOptions mixer_options() const;
  // The kind of layer `layer`'s mixer: gqa for attention_layers, else mixer.
  MixerKind layer_mixer(int64_t layer) const;
  // Whether some layer is gqa.
  bool has_attention() const;
  // The query heads of a gqa layer: attention_heads, else heads.
  int64_t gqa_heads() const { return attention_heads > 0 ? attention_heads : heads; }
  absl::Status ValidateHybrid() const;  // Validate's checks of the fields above
  // kInvalidArgument naming the first field out of range.
  absl::Status Validate() const;
  absl::Status ValidateMamba2() const;  // Validate's checks of the mamba2 sizes
  std::string ToJson() const;
  // Parses and validates; unknown keys are an error (a typo must not pass).
  static absl::StatusOr<LmConfig> FromJson(const std::string& json);
};

}  // namespace attn
