#include "model/mixers/aft.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/reference.h"
#include "tests/test_util.h"

namespace attn {
namespace {

using testing::AftBiasMatrix;
using testing::MaxAbsDiff;
using testing::SmallOptions;

torch::Tensor ReferenceOutput(Aft& aft, const torch::Tensor& x) {
  auto qkv = reference::ProjectQkv(aft->in_proj(), x, x);
  auto w = AftBiasMatrix(*aft, x.size(1));
  return reference::ApplyLinear(aft->out_proj(), reference::Aft(qkv[0], qkv[1], qkv[2], w));
}

class AftVariantTest : public ::testing::TestWithParam<MixerKind> {};

TEST_P(AftVariantTest, ParallelFormMatchesNestedLoopsInFloat64) {
  torch::manual_seed(21);
  Aft aft(SmallOptions(GetParam()));
  testing::RandomizePositionParameters(*aft);
  aft->to(torch::kDouble);
  auto x = torch::randn({2, 101, 32}, torch::kDouble);
  EXPECT_LT(MaxAbsDiff(aft->forward(x), ReferenceOutput(aft, x)), 1e-10);
}

TEST_P(AftVariantTest, FusedStepsMatchNestedLoops) {
  torch::manual_seed(22);
  Aft aft(SmallOptions(GetParam()));
  testing::RandomizePositionParameters(*aft);
  torch::NoGradGuard no_grad;
  auto x = torch::randn({2, 60, 32});
  auto state = aft->initial_state(2, torch::kCPU);
  std::vector<torch::Tensor> steps;
  for (int64_t t = 0; t < 60; ++t) steps.push_back(aft->step(x.select(1, t), state));
  EXPECT_LT(MaxAbsDiff(torch::stack(steps, 1), ReferenceOutput(aft, x)), 1e-5);
}

TEST_P(AftVariantTest, BlockSizeDoesNotChangeTheResult) {
  torch::manual_seed(23);
  auto options = SmallOptions(GetParam());
  Aft base(options);
  testing::RandomizePositionParameters(*base);
  base->to(torch::kDouble);
  auto x = torch::randn({1, 70, 32}, torch::kDouble);
  auto expected = base->forward(x);
  for (int64_t chunk : {1, 5, 128}) {
    options.chunk = chunk;
    Aft other(options);
    other->to(torch::kDouble);
    torch::NoGradGuard no_grad;
    auto src = base->parameters();
    auto dst = other->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
    EXPECT_LT(MaxAbsDiff(other->forward(x), expected), 1e-12) << "chunk " << chunk;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, AftVariantTest,
                         ::testing::Values(MixerKind::kAftFull, MixerKind::kAftLocal,
                                           MixerKind::kAftSimple, MixerKind::kAftConv),
                         testing::KindTestName<::testing::TestParamInfo<MixerKind>>);

// AFT-local's bias is zero outside the band, not minus infinity: a key far
// outside the window still moves the output.
TEST(AftLocal, KeysOutsideTheWindowStillContribute) {
  torch::manual_seed(24);
  auto options = SmallOptions(MixerKind::kAftLocal);
  Aft aft(options);
  testing::RandomizePositionParameters(*aft);
  torch::NoGradGuard no_grad;
  auto x = torch::randn({1, 40, 32});
  auto y = aft->forward(x);
  auto changed = x.clone();
  changed[0][2].add_(3.0);  // 37 positions before t = 39, window 8
  auto y_changed = aft->forward(changed);
  EXPECT_GT(MaxAbsDiff(y[0][39], y_changed[0][39]), 1e-4);
}

// AFT-conv's bias depends only on t - t', so it decodes past max_context.
TEST(AftConv, DecodesPastMaxContext) {
  torch::manual_seed(25);
  auto options = SmallOptions(MixerKind::kAftConv);
  options.max_context = 16;
  Aft aft(options);
  testing::RandomizePositionParameters(*aft);
  torch::NoGradGuard no_grad;
  auto x = torch::randn({1, 50, 32});
  auto state = aft->initial_state(1, torch::kCPU);
  std::vector<torch::Tensor> steps;
  for (int64_t t = 0; t < 50; ++t) steps.push_back(aft->step(x.select(1, t), state));
  EXPECT_EQ(aft->max_context(), -1);
  EXPECT_LT(MaxAbsDiff(torch::stack(steps, 1), aft->forward(x)), 1e-5);
}

TEST(AftFull, RefusesSequencesLongerThanItsBias) {
  auto options = SmallOptions(MixerKind::kAftFull);
  options.max_context = 16;
  Aft aft(options);
  EXPECT_THROW(aft->forward(torch::randn({1, 17, 32})), c10::Error);
  EXPECT_EQ(aft->max_context(), 16);
}

TEST(AftSimple, StateIsThreeVectorsPerSequence) {
  Aft aft(SmallOptions(MixerKind::kAftSimple));
  EXPECT_EQ(aft->state_bytes_per_sequence(1 << 20), 3 * 32 * 4 + 8);
}

}  // namespace
}  // namespace attn
