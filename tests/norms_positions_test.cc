#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "model/layers/norms.h"
#include "model/layers/positions.h"
#include "tests/reference.h"
#include "tests/test_util.h"

namespace attn {
namespace {

using testing::MaxAbsDiff;

TEST(Norms, MatchTheirFormulas) {
  torch::manual_seed(61);
  auto x = torch::randn({3, 5, 16}, torch::kDouble);
  for (auto kind : {NormKind::kLayerNorm, NormKind::kScaleNorm, NormKind::kRmsNorm}) {
    Norm norm(kind, 16);
    norm->to(torch::kDouble);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : norm->parameters()) p.uniform_(0.5, 1.5);
    }
    auto y = norm->forward(x);
    auto params = norm->named_parameters();
    auto g = params["gain"];
    torch::Tensor expected;
    const double eps = 1e-5;
    switch (kind) {
      case NormKind::kLayerNorm: {
        auto mean = x.mean(-1, true);
        auto var = (x - mean).pow(2).mean(-1, true);
        expected = g * (x - mean) / torch::sqrt(var + eps) + params["bias"];
        break;
      }
      case NormKind::kScaleNorm:
        expected = g * x / x.pow(2).sum(-1, true).sqrt();
        break;
      case NormKind::kRmsNorm:
        expected = g * x / torch::sqrt(x.pow(2).mean(-1, true) + eps);
        break;
    }
    EXPECT_LT(MaxAbsDiff(y, expected), 1e-10) << NormKindName(kind);
    NormKind parsed;
    ASSERT_TRUE(ParseNormKind(NormKindName(kind), &parsed));
    EXPECT_EQ(parsed, kind);
  }
}

TEST(Norms, FusedInferencePathEqualsTheAutogradPath) {
  torch::manual_seed(62);
  auto x = torch::randn({4, 24, 3}).transpose(1, 2);  // [4, 3, 24], not contiguous
  for (auto kind : {NormKind::kScaleNorm, NormKind::kRmsNorm}) {
    Norm norm(kind, 24);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : norm->parameters()) p.uniform_(0.5, 1.5);
    }
    auto tracked = norm->forward(x.clone().requires_grad_());  // op by op, under autograd
    torch::Tensor fused;
    {
      torch::InferenceMode inference;
      fused = norm->forward(x);
    }
    EXPECT_LT(MaxAbsDiff(fused, tracked.detach()), 1e-5) << NormKindName(kind);
  }
}

TEST(Norms, BackwardGivesFiniteGradients) {
  for (auto kind : {NormKind::kLayerNorm, NormKind::kScaleNorm, NormKind::kRmsNorm}) {
    Norm norm(kind, 16);
    auto x = torch::randn({2, 3, 16}, torch::requires_grad());
    norm->forward(x).pow(2).sum().backward();
    EXPECT_TRUE(torch::isfinite(x.grad()).all().item<bool>()) << NormKindName(kind);
    for (auto& p : norm->parameters()) {
      EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>()) << NormKindName(kind);
    }
  }
}

TEST(Positions, SinusoidMatchesTheFormula) {
  auto table = SinusoidalEmbedding(torch::arange(50), 24);
  for (int64_t p : {0, 1, 17, 49}) {
    auto expected = reference::Sinusoid(p, 24);
    for (int64_t c = 0; c < 24; ++c) {
      EXPECT_NEAR(table[p][c].item<double>(), expected[c], 1e-6) << "p=" << p << " c=" << c;
    }
  }
  SinusoidalPositions module(24);
  EXPECT_TRUE(module->forward(torch::arange(50)).equal(table));
}

TEST(Positions, SinusoidTablesGiveTheComputedValuesAtEveryPosition) {
  SinusoidalPositions tabled(24, /*table_positions=*/40);
  // Positions q * 40 + r: q = 0 (the first table alone: exact), q > 0 (the
  // angle-addition formulas), past 40^2 (computed), in [B, T] shapes.
  for (const auto& positions :
       {torch::arange(40), torch::arange(30, 130), torch::arange(1550, 1650),
        torch::tensor({{3, 39}, {0, 1599}}), torch::tensor({5}).view({1, 1})}) {
    const auto expected = SinusoidalEmbedding(positions, 24);
    const auto got = tabled->forward(positions);
    ASSERT_EQ(got.sizes(), expected.sizes()) << positions;
    EXPECT_LT(MaxAbsDiff(got, expected), 3e-7) << positions;
  }
  EXPECT_TRUE(tabled->forward(torch::arange(40)).equal(SinusoidalEmbedding(torch::arange(40), 24)));
  // The language model's tables (2048 rows) at positions up to 2048^2 - 1.
  SinusoidalPositions large(160, 2048);
  const auto far = torch::tensor({2047, 2048, 4095, 100000, 2048 * 2048 - 1});
  EXPECT_LT(MaxAbsDiff(large->forward(far), SinusoidalEmbedding(far, 160)), 3e-7);
}

TEST(Positions, LearnedTableIsTrainedAndBounded) {
  LearnedPositions positions(10, 8);
  auto y = positions->forward(torch::tensor({{0, 3, 9}}));
  EXPECT_EQ(y.sizes(), torch::IntArrayRef({1, 3, 8}));
  y.sum().backward();
  EXPECT_EQ(positions->table().grad().abs().sum(1).gt(0).sum().item<int64_t>(), 3);
  EXPECT_THROW(positions->forward(torch::tensor({10})), c10::Error);
}

}  // namespace
}  // namespace attn
