#include "model/checkpoints/public_shapes.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "model/lm/language_model.h"

namespace attn {
namespace {

// Parameters of a BlinkDL RWKV-7 checkpoint, counted from its tensor list
// (blocks.N.{ln0 (N = 0), ln1, ln2, att.{x_r, x_w, x_k, x_v, x_a, x_g, w0,
// w1, w2, a0, a1, a2, v0, v1, v2 (N > 0), g1, g2, k_k, k_a, r_k,
// receptance, key, value, output, ln_x}, ffn.{x_k, key, value}}, emb,
// ln_out, head).
int64_t Rwkv7CheckpointParameters(int64_t vocab, int64_t d, int64_t layers, const Rwkv7Ranks& r) {
  int64_t total = 2 * vocab * d + 2 * d + 2 * d;  // emb, head, ln_out, blocks.0.ln0
  for (int64_t l = 0; l < layers; ++l) {
    int64_t block = 2 * d + 2 * d;                      // ln1, ln2
    block += 6 * d;                                     // the six token-shift mixes
    block += d + 2 * d * r.decay + d + 2 * d * r.iclr;  // w0 w1 w2, a0 a1 a2
    if (l > 0) block += d + 2 * d * r.value;            // v0 v1 v2
    block += 2 * d * r.gate + d + d + d;                // g1 g2, k_k, k_a, r_k
    block += 4 * d * d + 2 * d;                         // r, k, v, o; ln_x
    block += d + 2 * 4 * d * d;                         // ffn x_k, key, value
    total += block;
  }
  return total;
}

// Parameters of a mamba_ssm Mamba-2 checkpoint with one group and a tied
// head (backbone.embedding, backbone.layers.N.{norm, mixer.{in_proj,
// conv1d (weight and bias), dt_bias, A_log, D, norm, out_proj}},
// backbone.norm_f).
int64_t Mamba2CheckpointParameters(int64_t vocab, int64_t d, int64_t layers) {
  const int64_t inner = 2 * d, state = 128, heads = inner / 64, conv = inner + 2 * state;
  const int64_t layer =
      d + (2 * inner + 2 * state + heads) * d + conv * 4 + conv + 3 * heads + inner + d * inner;
  return vocab * d + layers * layer + d;
}

TEST(PublicShapes, EveryNameHasAValidConfigAndOthersAreRefusedWithTheList) {
  ASSERT_EQ(PublicShapeNames().size(), 10u);
  for (const std::string& name : PublicShapeNames()) {
    absl::StatusOr<LmConfig> config = PublicShapeConfig(name);
    ASSERT_TRUE(config.ok()) << name << ": " << config.status();
  }
  absl::StatusOr<LmConfig> none = PublicShapeConfig("rwkv7-14b");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("one of rwkv7-0.1b, "), std::string::npos)
      << none.status();
}

TEST(PublicShapes, Rwkv7SizesAreThePublishedOnes) {
  const LmConfig small = *PublicShapeConfig("rwkv7-0.1b");
  EXPECT_EQ(small.mixer, MixerKind::kRwkv7);
  EXPECT_EQ(small.vocab_size, 65536);
  EXPECT_EQ(small.d_model, 768);
  EXPECT_EQ(small.layers, 12);
  EXPECT_EQ(small.heads, 12);
  EXPECT_EQ(small.ff_hidden, 3072);
  EXPECT_FALSE(small.tie_embeddings);
  // The low-rank sizes in BlinkDL's 0.1B and 7.2B checkpoints (w1, a1, v1, g1).
  EXPECT_EQ(small.rwkv7_ranks.decay, 64);
  EXPECT_EQ(small.rwkv7_ranks.iclr, 64);
  EXPECT_EQ(small.rwkv7_ranks.value, 32);
  EXPECT_EQ(small.rwkv7_ranks.gate, 128);
  const LmConfig large = *PublicShapeConfig("rwkv7-7.2b");
  EXPECT_EQ(large.d_model, 4096);
  EXPECT_EQ(large.layers, 32);
  EXPECT_EQ(large.heads, 64);
  EXPECT_EQ(large.rwkv7_ranks.decay, 128);
  EXPECT_EQ(large.rwkv7_ranks.value, 96);
  EXPECT_EQ(large.rwkv7_ranks.gate, 480);
}

TEST(PublicShapes, Mamba2SizesAreThePublishedOnes) {
  const LmConfig small = *PublicShapeConfig("mamba2-130m");
  EXPECT_EQ(small.mixer, MixerKind::kMamba2);
  EXPECT_EQ(small.vocab_size, 50288);
  EXPECT_EQ(small.d_model, 768);
  EXPECT_EQ(small.layers, 24);
  EXPECT_EQ(small.heads, 24);  // 2 * 768 / 64
  EXPECT_EQ(small.mamba2.state_size, 128);
  EXPECT_EQ(small.mamba2.groups, 1);
  EXPECT_TRUE(small.tie_embeddings);
  const LmConfig large = *PublicShapeConfig("mamba2-2.7b");
  EXPECT_EQ(large.d_model, 2560);
  EXPECT_EQ(large.layers, 64);
  EXPECT_EQ(large.heads, 80);
}

// A model built from the two smallest shapes holds exactly the parameters
// of the public checkpoint it stands for: the importers fill every
// parameter from one tensor, and these counts come from the checkpoints'
// tensor lists.
TEST(PublicShapes, TheSmallestModelsHoldTheirCheckpointsParameters) {
  torch::NoGradGuard no_grad;
  const LmConfig rwkv7 = *PublicShapeConfig("rwkv7-0.1b");
  EXPECT_EQ(CausalLm(rwkv7)->parameter_count(),
            Rwkv7CheckpointParameters(65536, 768, 12, rwkv7.rwkv7_ranks));
  EXPECT_EQ(CausalLm(*PublicShapeConfig("mamba2-130m"))->parameter_count(),
            Mamba2CheckpointParameters(50288, 768, 24));
}

}  // namespace
}  // namespace attn
