#include "model/mixers/linear_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/reference.h"
#include "tests/test_util.h"

namespace attn {
namespace {

using testing::MaxAbsDiff;
using testing::PrefillChunksThenStep;
using testing::SmallOptions;

class LinearAttentionTest : public ::testing::TestWithParam<MixerKind> {
 protected:
  bool exp_feature() const { return GetParam() == MixerKind::kLinearExp; }
};

TEST_P(LinearAttentionTest, CausalForwardMatchesNestedLoopsInFloat64) {
  torch::manual_seed(11);
  auto options = SmallOptions(GetParam());
  LinearAttention attention(options);
  attention->to(torch::kDouble);
  auto x = torch::randn({2, 45, options.d_model}, torch::kDouble);
  auto qkv = reference::ProjectQkv(attention->in_proj(), x, x);
  auto expected = reference::ApplyLinear(
      attention->out_proj(), reference::LinearAttention(qkv[0], qkv[1], qkv[2], options.heads,
                                                        exp_feature(), true, options.linear_eps));
  EXPECT_LT(MaxAbsDiff(attention->forward(x), expected), 1e-10);
}

TEST_P(LinearAttentionTest, FusedStepsMatchNestedLoops) {
  torch::manual_seed(12);
  auto options = SmallOptions(GetParam());
  LinearAttention attention(options);
  torch::NoGradGuard no_grad;
  auto x = torch::randn({2, 30, options.d_model});
  auto state = attention->initial_state(2, torch::kCPU);
  std::vector<torch::Tensor> steps;
  for (int64_t t = 0; t < 30; ++t) steps.push_back(attention->step(x.select(1, t), state));
  auto qkv = reference::ProjectQkv(attention->in_proj(), x, x);
  auto expected = reference::ApplyLinear(
      attention->out_proj(), reference::LinearAttention(qkv[0], qkv[1], qkv[2], options.heads,
                                                        exp_feature(), true, options.linear_eps));
  EXPECT_LT(MaxAbsDiff(torch::stack(steps, 1), expected), 1e-5);
}

TEST_P(LinearAttentionTest, NonCausalMatchesNestedLoopsAndIgnoresPadding) {
  torch::manual_seed(13);
  auto options = SmallOptions(GetParam());
  LinearAttention attention(options);
  attention->to(torch::kDouble);
  auto query = torch::randn({2, 6, options.d_model}, torch::kDouble);
  auto memory = torch::randn({2, 11, options.d_model}, torch::kDouble);
  auto qkv = reference::ProjectQkv(attention->in_proj(), query, memory);
  auto expected = reference::ApplyLinear(
      attention->out_proj(), reference::LinearAttention(qkv[0], qkv[1], qkv[2], options.heads,
                                                        exp_feature(), false, options.linear_eps));
  EXPECT_LT(MaxAbsDiff(attention->attend(query, memory, memory), expected), 1e-10);

  auto mask = torch::zeros({2, 11}, torch::kBool);
  mask.narrow(1, 8, 3).fill_(true);
  auto padded = attention->attend(query, memory, memory, mask);
  auto prefix = memory.narrow(1, 0, 8);
  EXPECT_LT(MaxAbsDiff(padded, attention->attend(query, prefix, prefix)), 1e-12);
}

TEST_P(LinearAttentionTest, NonCausalIsPermutationEquivariant) {
  torch::manual_seed(14);
  LinearAttention attention(SmallOptions(GetParam()));
  attention->to(torch::kDouble);
  auto x = torch::randn({2, 12, 32}, torch::kDouble);
  auto perm = torch::randperm(12);
  auto xp = x.index_select(1, perm);
  EXPECT_LT(
      MaxAbsDiff(attention->attend(xp, xp, xp), attention->attend(x, x, x).index_select(1, perm)),
      1e-12);
}

// The fused prefill and step have code paths for head sizes 32, 40 and 64
// (the bundled models use 40) and a general one; each must give the nested
// loops' result, prefilled in chunks that cross the blocks' edges and then
// stepped, each continuing the state the one before left.
TEST_P(LinearAttentionTest, FusedPrefillAndStepsMatchNestedLoopsAtEveryHeadSize) {
  // Head sizes with a kernel of their own and one without (72, wider than a
  // 64-float column group); blocks of 16 and of 70 (more than a column group
  // of keys, not whole vectors).
  for (int64_t head_dim : {8, 32, 40, 64, 72}) {
    for (int64_t block : {16, 70}) {
      torch::manual_seed(13);
      auto options = SmallOptions(GetParam());
      options.heads = 2;
      options.d_model = 2 * head_dim;
      options.chunk = block;
      LinearAttention attention(options);
      torch::NoGradGuard no_grad;
      auto x = torch::randn({2, 100, options.d_model});
      auto state = attention->initial_state(3, torch::kCPU);
      const auto slots = torch::tensor({2, 0});
      const auto outputs = PrefillChunksThenStep(*attention, x, state, slots, {20, 1, 75});
      auto qkv = reference::ProjectQkv(attention->in_proj(), x, x);
      auto expected = reference::ApplyLinear(
          attention->out_proj(),
          reference::LinearAttention(qkv[0], qkv[1], qkv[2], options.heads, exp_feature(), true,
                                     options.linear_eps));
      const std::string where =
          "head size " + std::to_string(head_dim) + ", block " + std::to_string(block);
      EXPECT_LT(MaxAbsDiff(outputs, expected), 1e-5) << where;
      EXPECT_TRUE(state.length.equal(torch::tensor({100, 0, 100}, torch::kLong))) << where;
      EXPECT_EQ(state.tensors[0][1].abs().max().item<float>(), 0.0f) << "row 1 was touched";
    }
  }
}

TEST_P(LinearAttentionTest, BlockSizeDoesNotChangeTheCausalForm) {
  torch::manual_seed(15);
  auto options = SmallOptions(GetParam());
  LinearAttention reference_module(options);
  reference_module->to(torch::kDouble);
  auto x = torch::randn({1, 50, options.d_model}, torch::kDouble);
  auto expected = reference_module->forward(x);
  for (int64_t chunk : {1, 7, 1000}) {
    options.chunk = chunk;
    LinearAttention other(options);
    other->to(torch::kDouble);
    torch::NoGradGuard no_grad;
    auto src = reference_module->parameters();
    auto dst = other->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
    EXPECT_LT(MaxAbsDiff(other->forward(x), expected), 1e-12) << "chunk " << chunk;
  }
}

// linear-decay: g_h from 0.6 to 0.9999 across the heads, so that the oldest
// keys of a head weigh from 0.6^400 (nothing) to nearly 1.
class LinearDecayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(17);
    options_ = SmallOptions(MixerKind::kLinearDecay);
    attention_ = LinearAttention(options_);
    torch::NoGradGuard no_grad;
    auto g = torch::tensor({0.6, 0.9, 0.99, 0.9999}, torch::kDouble);
    attention_->named_parameters()["decay_logit"].copy_(torch::log(torch::expm1(-torch::log(g))));
  }

  torch::Tensor Expected(const torch::Tensor& x) {
    auto decay = attention_->decay_factor().detach().to(torch::kDouble);
    std::vector<double> g(decay.data_ptr<double>(), decay.data_ptr<double>() + decay.numel());
    auto qkv = reference::ProjectQkv(attention_->in_proj(), x, x);
    return reference::ApplyLinear(attention_->out_proj(),
                                  reference::LinearAttention(qkv[0], qkv[1], qkv[2], options_.heads,
                                                             false, true, options_.linear_eps, g));
  }

  MixerOptions options_;
  LinearAttention attention_{nullptr};
};

TEST_F(LinearDecayTest, CausalForwardMatchesNestedLoopsInFloat64) {
  attention_->to(torch::kDouble);  // g in float64 too
  auto x = torch::randn({2, 45, options_.d_model}, torch::kDouble);
  auto expected = Expected(x);
  EXPECT_LT(MaxAbsDiff(attention_->forward(x), expected), 1e-10);
}

TEST_F(LinearDecayTest, FusedPrefillAndStepsMatchNestedLoops) {
  auto x = torch::randn({2, 400, options_.d_model});
  auto expected = Expected(x);
  torch::NoGradGuard no_grad;
  auto state = attention_->initial_state(2, torch::kCPU);
  auto y = PrefillChunksThenStep(*attention_, x, state, {}, {70, 1, 200});
  EXPECT_LT(MaxAbsDiff(y, expected), 1e-5);
  EXPECT_LT(MaxAbsDiff(attention_->forward(x), expected), 1e-5);
}

TEST_F(LinearDecayTest, NonCausalAttentionIsRefused) {
  auto x = torch::randn({1, 5, options_.d_model});
  EXPECT_THROW(attention_->attend(x, x, x), c10::Error);
}

INSTANTIATE_TEST_SUITE_P(FeatureMaps, LinearAttentionTest,
                         ::testing::Values(MixerKind::kLinearElu, MixerKind::kLinearExp),
                         testing::KindTestName<::testing::TestParamInfo<MixerKind>>);

}  // namespace
}  // namespace attn
