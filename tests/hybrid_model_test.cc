// A Granite 4.0-H-shaped hybrid (model/checkpoints/granite_checkpoint.h):
// Mamba-2 blocks each followed by a SwiGLU feed-forward
// (LmConfig::whole_block_ff), and grouped-query attention layers without
// positions and with heads of their own among them. Its three forms agree:
// the parallel forward, prefill in chunks that cut the Mamba-2 blocks'
// SSD blocks anywhere, and steps, on the fused float32 path and, in float64
// past 8,192 tokens, on the op-by-op path a GPU runs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/lm/language_model.h"
#include "model/lm/torchscript_methods.h"
#include "model/mixers/state_pool.h"
#include "tests/test_util.h"
#include "tests/tiny_model.h"

namespace attn {
namespace {

using testing::RelativeError;

LmConfig GraniteShaped() {
  LmConfig c;
  c.vocab_size = 53;
  c.d_model = 32;
  c.layers = 4;
  c.heads = 8;  // SSM heads: 64 inner channels, 8 each
  c.mixer = MixerKind::kMamba2;
  c.norm = NormKind::kRmsNorm;
  c.mamba2 = {16, 4, 2, 1};
  c.whole_block_ff = true;
  c.ff = FeedForwardKind::kSwiGlu;
  c.ff_hidden = 40;
  c.attention_layers = {1, 3};
  c.attention_heads = 2;
  c.kv_heads = 1;
  c.rope = false;
  c.max_context = 8400;
  return c;
}

CausalLm RandomModel(const LmConfig& config, uint64_t seed) {
  torch::manual_seed(seed);
  CausalLm model(config);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    torch::Tensor& t = p.value();
    if (t.dim() == 2) t.normal_(0.0, 1.0 / std::sqrt(static_cast<double>(t.size(1))));
    if (p.key().find("gain") != std::string::npos) t.normal_(1.0, 0.2);
  }
  model->eval();
  return model;
}

// Logits of `tokens` [B, T] by prefill chunks of `first`, then `chunk`,
// up to `steps_from`, then one step per token.
torch::Tensor ChunksThenSteps(CausalLm& model, const torch::Tensor& tokens, int64_t first,
                              int64_t chunk, int64_t steps_from) {
  std::vector<int64_t> chunks;
  for (int64_t t = 0, n = first; t < steps_from; t += n, n = chunk) {
    chunks.push_back(std::min(n, steps_from - t));
  }
  return testing::StreamedLogits(model, tokens, torch::kCPU, chunks);
}

TEST(HybridModelTest, ConfigRoundTripsAndHasTorchScriptMethods) {
  const LmConfig c = GraniteShaped();
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  absl::StatusOr<LmConfig> back = LmConfig::FromJson(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), c.ToJson());
  EXPECT_TRUE(back->whole_block_ff);
  EXPECT_FALSE(back->rope);
  EXPECT_EQ(back->attention_heads, 2);
  // tests/torchscript_export_test.cc runs them.
  EXPECT_TRUE(HasTorchScriptMethods(c));
  LmConfig rwkv = c;
  rwkv.mixer = MixerKind::kRwkv4;
  rwkv.norm = NormKind::kLayerNorm;
  EXPECT_NE(rwkv.Validate().message().find("whole_block_ff"), std::string::npos);
  LmConfig odd = c;
  odd.attention_heads = 3;
  EXPECT_NE(odd.Validate().message().find("attention.heads"), std::string::npos);
}

TEST(HybridModelTest, ChunkedPrefillAndStepsEqualForward) {
  CausalLm model = RandomModel(GraniteShaped(), 5);
  const auto tokens = torch::randint(0, 53, {3, 90}, torch::kLong);
  torch::NoGradGuard no_grad;
  const auto expected = model->forward(tokens);
  EXPECT_LT(RelativeError(ChunksThenSteps(model, tokens, 17, 23, 70), expected), 1e-5);
  // The layers' names are the checkpoint mapping's.
  const auto params = model->named_parameters();
  EXPECT_TRUE(params.contains("layers.0.ff.gate.weight"));
  EXPECT_TRUE(params.contains("layers.0.mixer.out_proj.weight"));
  EXPECT_TRUE(params.contains("layers.1.mix_norm.gain"));
  EXPECT_EQ(params["layers.1.mixer.qkv_proj.weight"].size(0), 32 + 2 * 16);
}

// Granite 4.0-H Tiny's shape: experts beside every layer's feed-forward.
// Rows of one decode step choose different experts; each row's output is
// the one it has alone.
TEST(HybridModelTest, ExpertsKeepTheFormsEqualAndRowsIndependent) {
  LmConfig config = GraniteShaped();
  config.moe = {6, 2, 12};
  ASSERT_TRUE(config.Validate().ok()) << config.Validate();
  CausalLm model = RandomModel(config, 8);
  EXPECT_TRUE(model->named_parameters().contains("layers.1.moe.experts.5.down.weight"));
  const auto tokens = torch::randint(0, 53, {4, 40}, torch::kLong);
  torch::NoGradGuard no_grad;
  const auto expected = model->forward(tokens);
  EXPECT_LT(RelativeError(ChunksThenSteps(model, tokens, 9, 13, 30), expected), 1e-5);
  const auto alone = model->forward(tokens.narrow(0, 2, 1));
  EXPECT_LT(RelativeError(alone, expected.narrow(0, 2, 1)), 1e-5);
  // int8 weights, the experts' too: a prefill and steps read the same int8
  // copies and round each row's activations alike, so they agree as Score
  // and a stream must; reading float weights anywhere would miss every
  // token by about 1e-2. Where a token's router has its k-th and next
  // experts within rounding, the activations (whose last bits differ
  // between a prefill and a step: the attention layers sum in another
  // order) may round to the other expert, and that row differs from there
  // on; three rows of four must agree at every token.
  EXPECT_GT(model->QuantizeInt8(), 0);
  const auto int8_forward = model->forward(tokens);
  EXPECT_GT(RelativeError(int8_forward, expected), 1e-3);
  const auto streamed = ChunksThenSteps(model, tokens, 9, 13, 30);
  const auto row_errors =
      (streamed - int8_forward).abs().amax({1, 2}) / int8_forward.abs().max();  // [B]
  EXPECT_GE((row_errors < 1e-4).sum().item<int64_t>(), 3) << row_errors;
  LmConfig gelu = config;
  gelu.ff = FeedForwardKind::kGelu;
  EXPECT_NE(gelu.Validate().message().find("moe"), std::string::npos);
}

// A pool of rows costs memory as its rows are written: the Mamba-2 layers'
// states are mapped zero pages, a released row gives its pages back, and a
// reused row continues exactly as a fresh one. (granite-4.0-h-1b holds
// 57 MB of state per sequence: a pool of 256 rows, allocated eagerly, would
// need 14.6 GB before the first request.)
TEST(HybridModelTest, StatePoolHoldsMemoryAsRowsAreWritten) {
  LmConfig config = GraniteShaped();
  config.mamba2.state_size = 128;  // 32 KiB of SSM state per row and layer
  CausalLm model = RandomModel(config, 11);
  torch::NoGradGuard no_grad;
  LmState pool = model->initial_state(64, torch::kCPU);
  const torch::Tensor& ssm = pool.layers[0].tensors[1];
  const int64_t row_bytes = ssm.nbytes() / 64;
  ASSERT_GE(row_bytes, 8 * 4096);
  EXPECT_EQ(ResidentBytes(ssm), 0) << "a new pool holds no memory";
  EXPECT_TRUE(IsLazyZeros(ssm));
  EXPECT_FALSE(IsLazyZeros(torch::zeros({64, 4})));

  const auto row = torch::tensor({5}, torch::kLong);
  const auto first = torch::randint(0, 53, {1, 30}, torch::kLong);
  model->prefill(first, pool, row, PrefillLogits::kNone);
  EXPECT_GE(ResidentBytes(ssm), row_bytes - 2 * 4096);
  EXPECT_LE(ResidentBytes(ssm), row_bytes + 2 * 4096) << "only the written row is backed";
  // The prefill backed the fresh row's fixed-size state before writing it
  // (SequenceMixer::BackRowsForWrite), but not the attention layer's keys,
  // which cover 8,400 positions a row and hold 30.
  const torch::Tensor& keys = pool.layers[1].tensors[0];
  ASSERT_GE(keys.nbytes() / 64, 64 * 4096);
  EXPECT_LE(ResidentBytes(keys), 2 * 4096) << "a key/value cache is backed as it is written";

  MixerState part;  // rows 4 and 5 as a view: not a whole pool
  part.length = pool.layers[0].length.narrow(0, 4, 2);
  for (const torch::Tensor& t : pool.layers[0].tensors) part.tensors.push_back(t.narrow(0, 4, 2));
  EXPECT_FALSE(ReleasePooledRows(part, torch::tensor({1}, torch::kLong)));
  EXPECT_GE(ResidentBytes(ssm), row_bytes - 2 * 4096) << "nothing released through a view";

  model->ReleaseSlots(pool, row);
  EXPECT_LE(ResidentBytes(ssm), 2 * 4096) << "the row's whole pages went back";
  EXPECT_EQ(pool.layers[0].length[5].item<int64_t>(), 0);
  EXPECT_EQ(ssm[5].abs().max().item<float>(), 0.0f);

  const auto second = torch::randint(0, 53, {1, 20}, torch::kLong);
  const auto expected = model->forward(second);
  model->ResetSlots(pool, row);
  const auto reused = model->prefill(second, pool, row, PrefillLogits::kAll);
  EXPECT_LT(RelativeError(reused, expected), 1e-5);
}

TEST(HybridModelTest, FormsAgreeInFloat64PastEightThousandTokens) {
  CausalLm model = RandomModel(GraniteShaped(), 6);
  model->to(torch::kDouble);
  torch::manual_seed(7);
  const int64_t time = 8300;
  const auto tokens = torch::randint(0, 53, {1, time}, torch::kLong);
  torch::NoGradGuard no_grad;
  const auto expected = model->forward(tokens);
  EXPECT_LT(RelativeError(ChunksThenSteps(model, tokens, 1000, 1237, time - 12), expected), 1e-10);
}

}  // namespace
}  // namespace attn
