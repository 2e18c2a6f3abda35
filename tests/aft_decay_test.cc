// aft-decay against the float64 nested loop of its formula
// (model/mixers/aft_decay.h): parallel form, fused prefill and fused steps,
// at short and at long context (past 8192 tokens), with keys of magnitude
// 1000 and decays from 1e-6 to 30 per token.
#include "model/mixers/aft_decay.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/reference.h"
#include "tests/test_util.h"

namespace attn {
namespace {

using testing::MaxAbsDiff;
using testing::SmallOptions;

// lambda_d as the module defines it: -log of the float32 decay factor.
torch::Tensor Lambda(const AftDecayImpl& aft) {
  return -torch::log(aft.decay_factor().detach().to(torch::kDouble));
}

torch::Tensor ReferenceOutput(AftDecay& aft, const torch::Tensor& x) {
  auto qkv = reference::ProjectQkv(aft->in_proj(), x, x);
  return reference::ApplyLinear(
      aft->out_proj(),
      reference::AftDecay(qkv[0], qkv[1], qkv[2], aft->position_bias(), Lambda(*aft)));
}

// Sets rho so that lambda runs log-evenly from lo to hi over the channels.
void SetDecays(AftDecayImpl& aft, double lo, double hi) {
  torch::NoGradGuard no_grad;
  const int64_t d = aft.decay_logit().size(0);
  auto f = torch::arange(d, torch::kDouble) / std::max<int64_t>(1, d - 1);
  auto lambda = torch::exp(std::log(lo) + f * (std::log(hi) - std::log(lo)));
  // softplus^-1, written to stay finite for lambda of 1e-6 and of 30.
  aft.decay_logit().copy_(lambda + torch::log(-torch::expm1(-lambda)));
}

AftDecay MakeAft(MixerOptions options, uint64_t seed) {
  torch::manual_seed(seed);
  options.kind = MixerKind::kAftDecay;
  AftDecay aft(options);
  torch::NoGradGuard no_grad;
  aft->position_bias().normal_(0.0, 0.5);
  SetDecays(*aft, 1e-3, 2.0);
  return aft;
}

// x through fused prefills of `chunk` tokens, then steps for the last
// `steps` tokens.
torch::Tensor PrefillThenSteps(AftDecayImpl& aft, const torch::Tensor& x, int64_t chunk,
                               int64_t steps) {
  torch::NoGradGuard no_grad;
  auto state = aft.initial_state(x.size(0), torch::kCPU);
  std::vector<torch::Tensor> outputs;
  const int64_t prompt = x.size(1) - steps;
  for (int64_t t = 0; t < prompt; t += chunk) {
    outputs.push_back(aft.prefill(x.narrow(1, t, std::min(chunk, prompt - t)), state));
  }
  for (int64_t t = prompt; t < x.size(1); ++t) {
    outputs.push_back(aft.step(x.select(1, t), state).unsqueeze(1));
  }
  return torch::cat(outputs, 1);
}

TEST(AftDecayTest, ParallelFormMatchesNestedLoopsInFloat64) {
  auto aft = MakeAft(SmallOptions(MixerKind::kAftDecay), 61);
  aft->to(torch::kDouble);
  auto x = torch::randn({2, 101, 32}, torch::kDouble);
  EXPECT_LT(MaxAbsDiff(aft->forward(x), ReferenceOutput(aft, x)), 1e-10);
}

TEST(AftDecayTest, FusedPrefillAndStepsMatchNestedLoops) {
  auto aft = MakeAft(SmallOptions(MixerKind::kAftDecay), 62);
  auto x = torch::randn({3, 90, 32});
  auto expected = ReferenceOutput(aft, x);
  EXPECT_LT(MaxAbsDiff(PrefillThenSteps(*aft, x, 90, 90), expected), 1e-5) << "steps";
  EXPECT_LT(MaxAbsDiff(PrefillThenSteps(*aft, x, 13, 20), expected), 1e-5) << "prefill";
  torch::NoGradGuard no_grad;
  EXPECT_LT(MaxAbsDiff(aft->forward(x), expected), 1e-5) << "parallel, float32";
}

// Every path, 8,300 tokens, decays from 1e-6 (a key 8,000 tokens back keeps
// 99% of its weight) to 2 per token.
TEST(AftDecayTest, LongContextMatchesNestedLoops) {
  auto options = SmallOptions(MixerKind::kAftDecay);
  options.d_model = 8;
  options.heads = 2;
  auto aft = MakeAft(options, 63);
  SetDecays(*aft, 1e-6, 2.0);
  auto x = torch::randn({1, 8300, 8});
  auto expected = ReferenceOutput(aft, x);
  EXPECT_LT(MaxAbsDiff(PrefillThenSteps(*aft, x, 8300, 8300), expected), 2e-5) << "steps";
  EXPECT_LT(MaxAbsDiff(PrefillThenSteps(*aft, x, 3000, 300), expected), 2e-5) << "prefill";
  torch::NoGradGuard no_grad;
  EXPECT_LT(MaxAbsDiff(aft->forward(x), expected), 2e-5) << "parallel, float32";
}

// Keys of +-1000 with decays of 1e-6 and of 30 per token: a key far above
// the rest fades (fast decay) and the keys after it must take over, which
// a maximum that never falls would have underflowed to 0/0.
TEST(AftDecayTest, HugeKeysAndExtremeDecaysStayFiniteAndExact) {
  for (const auto& [lo, hi] : {std::pair{1e-6, 1e-5}, std::pair{10.0, 30.0}}) {
    auto aft = MakeAft(SmallOptions(MixerKind::kAftDecay), 64);
    SetDecays(*aft, lo, hi);
    auto x = torch::randn({2, 300, 32});
    {
      torch::NoGradGuard no_grad;
      const int64_t d = 32;
      aft->in_proj()->weight.narrow(0, d, d).mul_(1000.0);
      aft->in_proj()->bias.narrow(0, d, d).mul_(1000.0);
    }
    // The reference takes the float32 projections, so that the comparison
    // measures the mixing, not the rounding of keys of 1000.
    torch::Tensor q, k, v;
    {
      torch::NoGradGuard no_grad;
      auto qkv = aft->in_proj()->forward(x).chunk(3, -1);
      q = qkv[0], k = qkv[1], v = qkv[2];
    }
    ASSERT_GT(k.abs().max().item<double>(), 500.0);
    auto expected = reference::ApplyLinear(
        aft->out_proj(), reference::AftDecay(q, k, v, aft->position_bias(), Lambda(*aft)));
    const std::string what = "lambda " + std::to_string(lo) + ".." + std::to_string(hi);
    torch::Tensor parallel;
    {
      torch::NoGradGuard no_grad;
      parallel = aft->forward(x);
    }
    for (const auto& [path, y] : {std::pair{"steps", PrefillThenSteps(*aft, x, 300, 300)},
                                  std::pair{"prefill", PrefillThenSteps(*aft, x, 37, 5)},
                                  std::pair{"parallel", parallel}}) {
      EXPECT_TRUE(torch::isfinite(y).all().item<bool>()) << what << " " << path;
      EXPECT_LT(MaxAbsDiff(y, expected), 1e-3) << what << " " << path;
    }
  }
}

// One key of +1000 among keys near 0, with a decay of 1 per token: after
// 1100 tokens it weighs exp(1000 - 1100) against the recent keys' exp(0),
// so the output must be the decayed average of the recent random values. The carried reference has
// to fall with it: one pinned at 1000 underflows every later key.
TEST(AftDecayTest, AFadedHugeKeyLetsLaterKeysBack) {
  auto options = SmallOptions(MixerKind::kAftDecay);
  options.d_model = 4;
  options.heads = 1;
  options.window = 2;
  AftDecay aft(options);
  torch::NoGradGuard no_grad;
  SetDecays(*aft, 1.0, 1.0);
  aft->position_bias().zero_();
  aft->in_proj()->weight.zero_();
  aft->in_proj()->bias.zero_();
  aft->in_proj()->weight.narrow(0, 4, 4).select(1, 0).fill_(1000.0);               // k = 1000 x_0
  for (int64_t c = 0; c < 4; ++c) aft->in_proj()->weight[8 + c][1 + c % 3] = 1.0;  // v from x_1..3
  auto x = torch::randn({1, 1200, 4});
  x.select(2, 0).fill_(1e-4);
  x[0][0][0] = 1.0;  // k = 1000 once, then k = 0.1
  auto expected = ReferenceOutput(aft, x);
  for (const auto& y : {PrefillThenSteps(*aft, x, 1200, 1200), PrefillThenSteps(*aft, x, 100, 50),
                        aft->forward(x)}) {
    EXPECT_TRUE(torch::isfinite(y).all().item<bool>());
    EXPECT_LT(MaxAbsDiff(y, expected), 1e-5);
  }
}

TEST(AftDecayTest, StateIsConstantInContext) {
  AftDecay aft(SmallOptions(MixerKind::kAftDecay));
  EXPECT_EQ(aft->state_bytes_per_sequence(8), aft->state_bytes_per_sequence(100000));
  EXPECT_EQ(aft->state_bytes_per_sequence(8), (3 + 2 * 8) * 32 * 4 + 8);
}

TEST(AftDecayTest, InitialDecaysSpanFastAndSlowChannelsInEveryHead) {
  AftDecay aft(SmallOptions(MixerKind::kAftDecay));
  auto lambda = Lambda(*aft).view({4, 8});
  for (int64_t h = 0; h < 4; ++h) {
    EXPECT_NEAR(lambda[h][0].item<double>(), 2e-4, 1e-5);
    EXPECT_NEAR(lambda[h][7].item<double>(), 1.0, 1e-4);
  }
}

}  // namespace
}  // namespace attn
