// Keys of magnitude 1000: exp(1000) overflows float32 and exp(-1000)
// underflows it. Every mixer must still give finite outputs that match the
// float64 reference, in its parallel form and in its step form.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/mixers/aft.h"
#include "model/mixers/linear_attention.h"
#include "model/mixers/multi_head_attention.h"
#include "tests/reference.h"
#include "tests/test_util.h"

namespace attn {
namespace {

using testing::MaxAbsDiff;
using testing::SmallOptions;

constexpr int64_t kStabilityTime = 48;
constexpr double kKeyScale = 1000.0;

// Scales W_k so that keys are about +-1000 and returns the mixer's q, k, v in
// float32 cast to float64, the inputs of the reference loops: the comparison
// then measures the mixing arithmetic, not the rounding of the projection.
std::array<torch::Tensor, 3> ScaleKeys(torch::nn::Linear in_proj, const torch::Tensor& x,
                                       double scale = kKeyScale) {
  torch::NoGradGuard no_grad;
  const int64_t d = in_proj->weight.size(1);
  in_proj->weight.narrow(0, d, d).mul_(scale);
  in_proj->bias.narrow(0, d, d).mul_(scale);
  auto qkv = in_proj->forward(x).chunk(3, -1);
  EXPECT_GT(qkv[1].abs().max().item<double>(), scale / 2);
  return {qkv[0].to(torch::kDouble), qkv[1].to(torch::kDouble), qkv[2].to(torch::kDouble)};
}

void ExpectFiniteAndClose(const torch::Tensor& y, const torch::Tensor& expected,
                          const std::string& what) {
  EXPECT_TRUE(torch::isfinite(y).all().item<bool>()) << what;
  // Keys of 1000 carry float32 rounding of ~6e-5 into the exponents.
  EXPECT_LT(MaxAbsDiff(y, expected), 1e-3) << what;
}

torch::Tensor Steps(SequenceMixer& mixer, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  auto state = mixer.initial_state(x.size(0), torch::kCPU);
  std::vector<torch::Tensor> steps;
  for (int64_t t = 0; t < x.size(1); ++t) steps.push_back(mixer.step(x.select(1, t), state));
  return torch::stack(steps, 1);
}

// The fused prefill in chunks of 20 (blocks of 16 cross them).
torch::Tensor Prefill(SequenceMixer& mixer, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  auto state = mixer.initial_state(x.size(0), torch::kCPU);
  std::vector<torch::Tensor> chunks;
  for (int64_t t = 0; t < x.size(1); t += 20) {
    chunks.push_back(mixer.prefill(x.narrow(1, t, std::min<int64_t>(20, x.size(1) - t)), state));
  }
  return torch::cat(chunks, 1);
}

class AftStabilityTest : public ::testing::TestWithParam<MixerKind> {};

TEST_P(AftStabilityTest, HugeKeysStayFiniteAndExact) {
  torch::manual_seed(41);
  Aft aft(SmallOptions(GetParam()));
  testing::RandomizePositionParameters(*aft);
  auto x = torch::randn({2, kStabilityTime, 32});
  auto qkv = ScaleKeys(aft->in_proj(), x);
  auto expected = reference::ApplyLinear(
      aft->out_proj(),
      reference::Aft(qkv[0], qkv[1], qkv[2], testing::AftBiasMatrix(*aft, kStabilityTime)));
  torch::NoGradGuard no_grad;
  ExpectFiniteAndClose(aft->forward(x), expected, "parallel");
  ExpectFiniteAndClose(Steps(*aft, x), expected, "step");
  ExpectFiniteAndClose(Prefill(*aft, x), expected, "prefill");
}

// Keys spread by tens: the fused prefill's blocks take the block-wide
// maximum where keys rise less than 40 within them and each query's own
// maximum elsewhere (kernels::AftPrefill); at this scale about one block in
// six takes the second path. Both stay exact.
TEST_P(AftStabilityTest, KeysSpreadByTensPrefillExactly) {
  torch::manual_seed(44);
  Aft aft(SmallOptions(GetParam()));
  testing::RandomizePositionParameters(*aft);
  auto x = torch::randn({2, kStabilityTime, 32});
  auto qkv = ScaleKeys(aft->in_proj(), x, 25.0);
  auto expected = reference::ApplyLinear(
      aft->out_proj(),
      reference::Aft(qkv[0], qkv[1], qkv[2], testing::AftBiasMatrix(*aft, kStabilityTime)));
  EXPECT_LT(MaxAbsDiff(Prefill(*aft, x), expected), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Variants, AftStabilityTest,
                         ::testing::Values(MixerKind::kAftFull, MixerKind::kAftLocal,
                                           MixerKind::kAftSimple, MixerKind::kAftConv),
                         testing::KindTestName<::testing::TestParamInfo<MixerKind>>);

// The early prefixes are the trap: a key of -1000 followed by one of +1000.
// With one maximum over the whole sequence the first outputs are 0/0.
TEST(AftStability, RisingKeysDoNotUnderflowEarlyPrefixes) {
  auto options = SmallOptions(MixerKind::kAftSimple);
  options.d_model = 4;
  options.heads = 1;
  Aft aft(options);
  torch::NoGradGuard no_grad;
  aft->in_proj()->weight.zero_();
  aft->in_proj()->bias.zero_();
  aft->in_proj()->weight.narrow(0, 4, 4).copy_(torch::eye(4) * kKeyScale);  // k = 1000 x
  aft->in_proj()->weight.narrow(0, 8, 4).copy_(torch::eye(4));              // v = x
  auto x = torch::tensor({-1.0f, 1.0f, -0.5f}).view({1, 3, 1}).expand({1, 3, 4}).contiguous();
  aft->out_proj()->weight.copy_(torch::eye(4));
  aft->out_proj()->bias.zero_();
  // q = 0, so y_t = 0.5 * (softmax-weighted v). y_0 sees only v_0; y_1 and
  // y_2 are dominated by key 1 (+1000).
  for (const auto& y : {aft->forward(x)[0], Steps(*aft, x)[0], Prefill(*aft, x)[0]}) {
    EXPECT_NEAR(y[0][0].item<double>(), 0.5 * -1.0, 1e-6);
    EXPECT_NEAR(y[1][0].item<double>(), 0.5 * 1.0, 1e-6);
    EXPECT_NEAR(y[2][0].item<double>(), 0.5 * 1.0, 1e-6);
  }
}

class LinearStabilityTest : public ::testing::TestWithParam<MixerKind> {};

TEST_P(LinearStabilityTest, HugeKeysStayFiniteAndExact) {
  torch::manual_seed(42);
  auto options = SmallOptions(GetParam());
  LinearAttention attention(options);
  auto x = torch::randn({2, kStabilityTime, 32});
  auto qkv = ScaleKeys(attention->in_proj(), x);
  const bool exp = GetParam() == MixerKind::kLinearExp;
  auto expected = reference::ApplyLinear(
      attention->out_proj(), reference::LinearAttention(qkv[0], qkv[1], qkv[2], options.heads, exp,
                                                        true, options.linear_eps));
  torch::NoGradGuard no_grad;
  ExpectFiniteAndClose(attention->forward(x), expected, "parallel");
  ExpectFiniteAndClose(Steps(*attention, x), expected, "step");
}

INSTANTIATE_TEST_SUITE_P(FeatureMaps, LinearStabilityTest,
                         ::testing::Values(MixerKind::kLinearElu, MixerKind::kLinearExp),
                         testing::KindTestName<::testing::TestParamInfo<MixerKind>>);

TEST(SoftmaxStability, HugeKeysStayFiniteAndExact) {
  torch::manual_seed(43);
  auto options = SmallOptions(MixerKind::kMhaAlibi);
  MultiHeadAttention mha(options);
  auto x = torch::randn({2, kStabilityTime, 32});
  auto qkv = ScaleKeys(mha->in_proj(), x);
  auto slopes = mha->alibi_slopes();
  std::vector<double> s(slopes.data_ptr<float>(), slopes.data_ptr<float>() + slopes.numel());
  auto expected = reference::ApplyLinear(
      mha->out_proj(),
      reference::SoftmaxAttention(qkv[0], qkv[1], qkv[2], options.heads, true, 0, s));
  torch::NoGradGuard no_grad;
  ExpectFiniteAndClose(mha->forward(x), expected, "parallel");
  ExpectFiniteAndClose(Steps(*mha, x), expected, "step");
}

}  // namespace
}  // namespace attn
