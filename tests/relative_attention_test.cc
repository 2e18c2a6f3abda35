#include "model/mixers/relative_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/reference.h"
#include "tests/test_util.h"

namespace attn {
namespace {

using testing::MaxAbsDiff;
using testing::SmallOptions;

// The module keeps its sinusoid table in float32 (a buffer), so even in
// float64 it differs from the reference's exact sinusoid by ~1e-9.
constexpr double kFloat64Tolerance = 1e-8;

class RelativeAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(31);
    xl_ = RelativeMultiHeadAttention(SmallOptions(MixerKind::kRelative));
    testing::RandomizePositionParameters(*xl_);
    xl_->to(torch::kDouble);
  }

  // The float64 loops over queries `segment` at positions offset.. and keys
  // `context` at 0.. .
  torch::Tensor Reference(const torch::Tensor& segment, const torch::Tensor& context,
                          int64_t offset) {
    auto qkv = reference::ProjectQkv(xl_->in_proj(), segment, context);
    return reference::ApplyLinear(
        xl_->out_proj(), reference::RelativeAttention(
                             qkv[0], qkv[1], qkv[2], xl_->content_bias(), xl_->position_bias(),
                             xl_->position_proj()->weight, xl_->options().heads, offset));
  }

  RelativeMultiHeadAttention xl_{nullptr};
};

TEST_F(RelativeAttentionTest, ForwardMatchesNestedLoopsInFloat64) {
  auto x = torch::randn({2, 23, 32}, torch::kDouble);
  EXPECT_LT(MaxAbsDiff(xl_->forward(x), Reference(x, x, 0)), kFloat64Tolerance);
}

TEST_F(RelativeAttentionTest, MemoryEqualsAttentionOverConcatenation) {
  auto memory = torch::randn({2, 19, 32}, torch::kDouble);
  auto segment = torch::randn({2, 13, 32}, torch::kDouble);
  auto [y, next] = xl_->forward_with_memory(segment, memory);
  auto context = torch::cat({memory, segment}, 1);
  EXPECT_LT(MaxAbsDiff(y, Reference(segment, context, 19)), kFloat64Tolerance);
  // With the whole past as memory, a segment's output is that of the full
  // sequence: the relative positions line up across the boundary.
  EXPECT_LT(MaxAbsDiff(y, xl_->forward(context).narrow(1, 19, 13)), 1e-10);
  EXPECT_TRUE(next.equal(context.narrow(1, 32 - 32, 32)));  // mem_len 64 keeps all 32
}

TEST_F(RelativeAttentionTest, MemoryKeepsTheLastMemLenPositions) {
  auto options = SmallOptions(MixerKind::kRelative);
  options.mem_len = 5;
  RelativeMultiHeadAttention xl(options);
  auto segment1 = torch::randn({1, 9, 32});
  auto segment2 = torch::randn({1, 4, 32});
  auto [y1, memory] = xl->forward_with_memory(segment1, {});
  EXPECT_TRUE(memory.equal(segment1.narrow(1, 4, 5)));
  auto [y2, next] = xl->forward_with_memory(segment2, memory);
  EXPECT_TRUE(next.equal(torch::cat({segment1.narrow(1, 8, 1), segment2}, 1)));
  EXPECT_FALSE(next.requires_grad());
}

// Entries of the relative shift that fall outside the range are masked, not
// wrapped: no output may depend on a later token.
TEST_F(RelativeAttentionTest, LaterTokensNeverLeakIntoEarlierOutputs) {
  auto x = torch::randn({1, 20, 32}, torch::kDouble);
  auto y = xl_->forward(x);
  auto changed = x.clone();
  changed[0].narrow(0, 10, 10).normal_();
  EXPECT_LT(MaxAbsDiff(y[0].narrow(0, 0, 10), xl_->forward(changed)[0].narrow(0, 0, 10)), 1e-12);
}

torch::Tensor StepThrough(RelativeMultiHeadAttention& xl, const torch::Tensor& x) {
  auto state = xl->initial_state(x.size(0), torch::kCPU);
  std::vector<torch::Tensor> steps;
  for (int64_t t = 0; t < x.size(1); ++t) steps.push_back(xl->step(x.select(1, t), state));
  return torch::stack(steps, 1);
}

// A server builds and runs its model under InferenceMode, whose tensors keep
// no version counter: the cached W_r R must not need one.
TEST(RelativeAttentionSteps, WorkForAModuleBuiltUnderInferenceMode) {
  c10::InferenceMode inference;
  torch::manual_seed(32);
  RelativeMultiHeadAttention xl(SmallOptions(MixerKind::kRelative));
  testing::RandomizePositionParameters(*xl);
  auto x = torch::randn({2, 30, 32});
  EXPECT_LT(MaxAbsDiff(StepThrough(xl, x), xl->forward(x)), 1e-5);
}

// The cached W_r R follows an in-place change of W_r.
TEST(RelativeAttentionSteps, FollowAnInPlaceChangeOfThePositionProjection) {
  torch::manual_seed(33);
  RelativeMultiHeadAttention xl(SmallOptions(MixerKind::kRelative));
  testing::RandomizePositionParameters(*xl);
  torch::NoGradGuard no_grad;
  auto x = torch::randn({1, 20, 32});
  StepThrough(xl, x);  // fills the cache
  xl->position_proj()->weight.mul_(-2.0);
  EXPECT_LT(MaxAbsDiff(StepThrough(xl, x), xl->forward(x)), 1e-5);
}

}  // namespace
}  // namespace attn
