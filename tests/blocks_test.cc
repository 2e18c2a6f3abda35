#include "model/blocks/blocks.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/mixers/mixer.h"
#include "model/mixers/relative_attention.h"
#include "tests/test_util.h"

namespace attn {
namespace {

using testing::MaxAbsDiff;

BlockOptions SmallBlock(AttentionKind attention, NormKind norm = NormKind::kLayerNorm) {
  BlockOptions o;
  o.d_model = 32;
  o.heads = 4;
  o.ff_hidden = 64;
  o.attention = attention;
  o.norm = norm;
  o.max_context = 128;
  return o;
}

class BlockTest : public ::testing::TestWithParam<AttentionKind> {};

TEST_P(BlockTest, EncoderIsPermutationEquivariant) {
  torch::manual_seed(51);
  EncoderBlock block(SmallBlock(GetParam(), NormKind::kRmsNorm));
  block->to(torch::kDouble);
  auto x = torch::randn({2, 15, 32}, torch::kDouble);
  auto perm = torch::randperm(15);
  EXPECT_LT(
      MaxAbsDiff(block->forward(x.index_select(1, perm)), block->forward(x).index_select(1, perm)),
      1e-10);
}

TEST_P(BlockTest, EncoderIgnoresPaddedPositions) {
  torch::manual_seed(52);
  EncoderBlock block(SmallBlock(GetParam()));
  block->to(torch::kDouble);
  auto x = torch::randn({1, 10, 32}, torch::kDouble);
  auto mask = torch::zeros({1, 10}, torch::kBool);
  mask.narrow(1, 6, 4).fill_(true);
  auto noisy = x.clone();
  noisy.narrow(1, 6, 4).normal_();
  EXPECT_LT(MaxAbsDiff(block->forward(x, mask).narrow(1, 0, 6),
                       block->forward(noisy, mask).narrow(1, 0, 6)),
            1e-10);
}

TEST_P(BlockTest, DecoderIsCausalInItsInput) {
  torch::manual_seed(53);
  DecoderBlock block(SmallBlock(GetParam(), NormKind::kScaleNorm));
  block->to(torch::kDouble);
  auto x = torch::randn({2, 12, 32}, torch::kDouble);
  auto memory = torch::randn({2, 7, 32}, torch::kDouble);
  auto changed = x.clone();
  changed.narrow(1, 6, 6).normal_();
  EXPECT_LT(MaxAbsDiff(block->forward(x, memory).narrow(1, 0, 6),
                       block->forward(changed, memory).narrow(1, 0, 6)),
            1e-10);
  // ... and it does read the memory (a rescaled memory would not show it:
  // the memory is normalised).
  auto other_memory = torch::randn({2, 7, 32}, torch::kDouble);
  EXPECT_GT(MaxAbsDiff(block->forward(x, memory), block->forward(x, other_memory)), 1e-6);
}

TEST_P(BlockTest, PerceiverOutputSizeDoesNotDependOnInputLength) {
  torch::manual_seed(54);
  PerceiverBlock block(SmallBlock(GetParam()), /*latents=*/6);
  block->to(torch::kDouble);
  for (int64_t length : {1, 9, 200}) {
    auto y = block->forward(torch::randn({3, length, 32}, torch::kDouble));
    EXPECT_EQ(y.sizes(), torch::IntArrayRef({3, 6, 32})) << "input length " << length;
  }
  auto x = torch::randn({2, 20, 32}, torch::kDouble);
  auto perm = torch::randperm(20);
  EXPECT_LT(MaxAbsDiff(block->forward(x), block->forward(x.index_select(1, perm))), 1e-10);
}

TEST_P(BlockTest, InducedSetBlockIsPermutationEquivariant) {
  torch::manual_seed(55);
  InducedSetBlock block(SmallBlock(GetParam()), /*inducing_points=*/4);
  block->to(torch::kDouble);
  auto x = torch::randn({2, 17, 32}, torch::kDouble);
  auto perm = torch::randperm(17);
  auto y = block->forward(x);
  EXPECT_EQ(y.sizes(), x.sizes());
  EXPECT_LT(MaxAbsDiff(block->forward(x.index_select(1, perm)), y.index_select(1, perm)), 1e-10);
}

TEST_P(BlockTest, BackwardGivesFiniteGradients) {
  torch::manual_seed(56);
  auto options = SmallBlock(GetParam());
  EncoderBlock encoder(options);
  DecoderBlock decoder(options);
  PerceiverBlock perceiver(options, 5);
  InducedSetBlock induced(options, 3);
  auto x = torch::randn({2, 9, 32}, torch::requires_grad());
  auto loss = encoder->forward(x).sum() + decoder->forward(x, x).sum() +
              perceiver->forward(x).sum() + induced->forward(x).sum();
  loss.backward();
  EXPECT_TRUE(torch::isfinite(x.grad()).all().item<bool>());
  for (torch::nn::Module* m : std::vector<torch::nn::Module*>{encoder.get(), decoder.get(),
                                                              perceiver.get(), induced.get()}) {
    for (auto& p : m->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      EXPECT_TRUE(torch::isfinite(p.value().grad()).all().item<bool>()) << p.key();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Attention, BlockTest,
                         ::testing::Values(AttentionKind::kSoftmax, AttentionKind::kLinearElu,
                                           AttentionKind::kLinearExp));

class MixerGradientTest : public ::testing::TestWithParam<MixerKind> {};

TEST_P(MixerGradientTest, BackwardGivesFiniteGradientsForEveryParameter) {
  torch::manual_seed(57);
  auto options = testing::SmallOptions(GetParam());
  options.learn_alibi_slopes = true;
  auto mixer = MakeMixer(options);
  testing::RandomizePositionParameters(*mixer);
  auto x = torch::randn({2, 40, 32}, torch::requires_grad());
  mixer->forward(x).pow(2).sum().backward();
  EXPECT_TRUE(torch::isfinite(x.grad()).all().item<bool>());
  EXPECT_GT(x.grad().abs().sum().item<double>(), 0.0);
  for (auto& p : mixer->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_TRUE(torch::isfinite(p.value().grad()).all().item<bool>()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
  }
}

INSTANTIATE_TEST_SUITE_P(AllMixers, MixerGradientTest, ::testing::ValuesIn(AllMixerKinds()),
                         testing::KindTestName<::testing::TestParamInfo<MixerKind>>);

TEST(RelativeAttentionGradient, FlowsThroughASegmentWithMemory) {
  RelativeMultiHeadAttention xl(testing::SmallOptions(MixerKind::kRelative));
  auto memory = torch::randn({1, 8, 32}, torch::requires_grad());
  auto x = torch::randn({1, 5, 32}, torch::requires_grad());
  auto [y, next] = xl->forward_with_memory(x, memory);
  y.sum().backward();
  EXPECT_TRUE(torch::isfinite(x.grad()).all().item<bool>());
  EXPECT_FALSE(memory.grad().defined());  // memory is a constant, as in the paper
}

}  // namespace
}  // namespace attn
