#include "model/mixers/multi_head_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "model/mixers/kv_cache.h"
#include "tests/reference.h"
#include "tests/test_util.h"

namespace attn {
namespace {

using testing::MaxAbsDiff;
using testing::PrefillChunksThenStep;
using testing::SmallOptions;

std::vector<double> ToVector(const torch::Tensor& t) {
  auto d = t.detach().to(torch::kDouble).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

TEST(ScaledDotProductAttention, MatchesNestedLoops) {
  torch::manual_seed(1);
  auto q = torch::randn({2, 9, 16}, torch::kDouble);
  auto k = torch::randn({2, 13, 16}, torch::kDouble);
  auto v = torch::randn({2, 13, 16}, torch::kDouble);
  auto split = [](const torch::Tensor& x) { return x.view({2, -1, 2, 8}).transpose(1, 2); };
  auto bias = CausalBias(9, 13, 4, q.options());
  auto y = ScaledDotProductAttention(split(q), split(k), split(v), bias);
  y = y.transpose(1, 2).reshape({2, 9, 16});
  auto expected = reference::SoftmaxAttention(q, k, v, 2, /*causal=*/true, /*offset=*/4, {});
  EXPECT_LT(MaxAbsDiff(y, expected), 1e-12);
}

TEST(ScaledDotProductAttention, SkippingTheMaskedRowFixChangesNothingUnderACausalMask) {
  torch::manual_seed(2);
  auto q = torch::randn({2, 3, 6, 8});
  auto k = torch::randn({2, 3, 6, 8});
  auto v = torch::randn({2, 3, 6, 8});
  auto bias = CausalBias(6, 6, 0, q.options());
  auto checked = ScaledDotProductAttention(q, k, v, bias, /*rows_may_be_all_masked=*/true);
  auto unchecked = ScaledDotProductAttention(q, k, v, bias, /*rows_may_be_all_masked=*/false);
  EXPECT_TRUE(torch::equal(checked, unchecked));
}

TEST(ScaledDotProductAttention, AQueryWithEveryKeyMaskedGetsZeros) {
  torch::manual_seed(3);
  auto q = torch::randn({1, 1, 4, 8});
  auto k = torch::randn({1, 1, 5, 8});
  auto v = torch::randn({1, 1, 5, 8});
  // Query 2 sees no key; the others see all of them.
  auto bias = torch::zeros({4, 5});
  bias[2].fill_(-std::numeric_limits<float>::infinity());
  auto y = ScaledDotProductAttention(q, k, v, bias);
  EXPECT_TRUE(torch::equal(y[0][0][2], torch::zeros({8})));
  EXPECT_FALSE(y.isnan().any().item<bool>());
  EXPECT_GT(y[0][0][0].abs().sum().item<float>(), 0.0f);
}

TEST(Alibi, GeometricSlopesFromThePaper) {
  auto slopes = AlibiSlopes(8);
  for (int h = 0; h < 8; ++h) EXPECT_FLOAT_EQ(slopes[h].item<float>(), std::pow(2.0f, -(h + 1)));
}

class MhaReferenceTest : public ::testing::TestWithParam<MixerKind> {};

// The module's causal self-attention of x by the nested loops, with its own
// weights and ALiBi slopes.
torch::Tensor CausalByNestedLoops(MultiHeadAttention& mha, const torch::Tensor& x, int64_t heads) {
  auto qkv = reference::ProjectQkv(mha->in_proj(), x, x);
  std::vector<double> slopes;
  if (mha->uses_alibi()) slopes = ToVector(mha->alibi_slopes());
  return reference::ApplyLinear(
      mha->out_proj(),
      reference::SoftmaxAttention(qkv[0], qkv[1], qkv[2], heads, /*causal=*/true, 0, slopes));
}

TEST_P(MhaReferenceTest, CausalForwardMatchesNestedLoopsInFloat64) {
  torch::manual_seed(2);
  auto options = SmallOptions(GetParam());
  options.learn_alibi_slopes = true;
  MultiHeadAttention mha(options);
  {
    torch::NoGradGuard no_grad;  // slopes away from the default, still positive
    for (auto& p : mha->named_parameters()) {
      if (p.key().find("alibi") != std::string::npos) p.value().add_(0.3);
    }
  }
  mha->to(torch::kDouble);
  auto x = torch::randn({2, 37, options.d_model}, torch::kDouble);
  EXPECT_LT(MaxAbsDiff(mha->forward(x), CausalByNestedLoops(mha, x, options.heads)), 1e-10);
}

TEST_P(MhaReferenceTest, FusedStepsMatchNestedLoops) {
  torch::manual_seed(3);
  auto options = SmallOptions(GetParam());
  MultiHeadAttention mha(options);
  torch::NoGradGuard no_grad;
  auto x = torch::randn({2, 40, options.d_model});
  auto state = mha->initial_state(2, torch::kCPU);
  std::vector<torch::Tensor> steps;
  for (int64_t t = 0; t < 40; ++t) steps.push_back(mha->step(x.select(1, t), state));
  EXPECT_LT(MaxAbsDiff(torch::stack(steps, 1), CausalByNestedLoops(mha, x, options.heads)), 1e-5);
}

// The fused prefill and step have code paths for head sizes 32, 40 and 64
// (the bundled models use 40) and a general one; each must give the nested
// loops' result, prefilled into scattered slots in chunks that cross the
// 16-key score vectors' and 64-key groups' edges (so that the causal mask
// falls inside later groups, and a tile's two halves straddle a group), with
// whole and partial tiles of eight queries, each chunk continuing the cache
// the one before left (the last over 103 cached keys, so that its queries
// fold two whole key groups into their running softmax before the diagonal),
// then stepped through cache lengths of every remainder modulo the step's
// four-key groups.
TEST_P(MhaReferenceTest, FusedPrefillAndStepsMatchNestedLoopsAtEveryHeadSize) {
  for (int64_t head_dim : {8, 32, 40, 64}) {
    torch::manual_seed(4);
    auto options = SmallOptions(GetParam());
    options.heads = 2;
    options.max_context = 512;
    options.d_model = 2 * head_dim;
    MultiHeadAttention mha(options);
    torch::NoGradGuard no_grad;
    auto x = torch::randn({2, 300, options.d_model});
    auto state = mha->initial_state(3, torch::kCPU);
    const auto slots = torch::tensor({2, 0});
    const auto outputs = PrefillChunksThenStep(*mha, x, state, slots, {17, 1, 15, 70, 150});
    EXPECT_LT(MaxAbsDiff(outputs, CausalByNestedLoops(mha, x, options.heads)), 1e-5)
        << "head size " << head_dim;
    EXPECT_TRUE(state.length.equal(torch::tensor({300, 0, 300}, torch::kLong)))
        << "head size " << head_dim;
  }
}

INSTANTIATE_TEST_SUITE_P(MhaKinds, MhaReferenceTest,
                         ::testing::Values(MixerKind::kMha, MixerKind::kMhaAlibi),
                         testing::KindTestName<::testing::TestParamInfo<MixerKind>>);

TEST(MultiHeadAttention, PaddedKeysAreIgnored) {
  torch::manual_seed(4);
  auto options = SmallOptions(MixerKind::kMhaAlibi);
  MultiHeadAttention mha(options);
  mha->to(torch::kDouble);
  auto x = torch::randn({2, 10, options.d_model}, torch::kDouble);
  auto mask = torch::zeros({2, 10}, torch::kBool);
  mask[0].narrow(0, 7, 3).fill_(true);
  auto y = mha->attend(x, x, x, mask);
  auto noisy = x.clone();
  noisy[0].narrow(0, 7, 3).normal_();  // what the padding holds must not matter
  auto y_noisy = mha->attend(noisy, noisy, noisy, mask);
  EXPECT_LT(MaxAbsDiff(y[0].narrow(0, 0, 7), y_noisy[0].narrow(0, 0, 7)), 1e-12);
  auto qkv = reference::ProjectQkv(mha->in_proj(), x, x);
  std::vector<std::vector<bool>> padding(2, std::vector<bool>(10, false));
  for (int j = 7; j < 10; ++j) padding[0][j] = true;
  auto expected = reference::ApplyLinear(
      mha->out_proj(), reference::SoftmaxAttention(qkv[0], qkv[1], qkv[2], options.heads, false, 0,
                                                   ToVector(mha->alibi_slopes()), padding));
  EXPECT_LT(MaxAbsDiff(y, expected), 1e-10);
}

TEST(MultiHeadAttention, NonCausalIsPermutationEquivariant) {
  torch::manual_seed(5);
  MultiHeadAttention mha(SmallOptions(MixerKind::kMha));
  mha->to(torch::kDouble);
  auto x = torch::randn({2, 12, 32}, torch::kDouble);
  auto perm = torch::randperm(12);
  auto y = mha->attend(x, x, x);
  auto xp = x.index_select(1, perm);
  EXPECT_LT(MaxAbsDiff(mha->attend(xp, xp, xp), y.index_select(1, perm)), 1e-12);
}

TEST(MultiHeadAttention, LearnedAlibiSlopesReceiveGradients) {
  auto options = SmallOptions(MixerKind::kMhaAlibi);
  options.learn_alibi_slopes = true;
  MultiHeadAttention mha(options);
  mha->forward(torch::randn({1, 9, 32})).pow(2).sum().backward();
  bool found = false;
  for (auto& p : mha->named_parameters()) {
    if (p.key().find("alibi") == std::string::npos) continue;
    found = true;
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0);
  }
  EXPECT_TRUE(found);
}

// The cache is backed by memory only where it is written, and a released
// row gives its pages back and reads as zeros: a pool of long rows costs
// what its sequences hold, not its capacity.
TEST(KvCache, RowsHoldMemoryAsWrittenAndGiveItBack) {
  torch::manual_seed(9);
  MixerOptions o = SmallOptions(MixerKind::kMha);
  o.max_context = 4096;
  MultiHeadAttention mha(o);
  mha->eval();
  torch::NoGradGuard no_grad;
  MixerState state = mha->initial_state(8, torch::kCPU);
  const torch::Tensor& keys = state.tensors[0];
  const int64_t row_bytes = keys.nbytes() / 8;
  EXPECT_EQ(ResidentBytes(keys), 0) << "a new pool holds no memory";

  const torch::Tensor slot = torch::tensor({3}, torch::kLong);
  mha->prefill(torch::randn({1, 100, o.d_model}), state, slot);
  const int64_t held = ResidentBytes(keys);
  // 100 positions of each of 4 heads of 8 floats: 3,200 bytes, in at most
  // one page per head plus one at each end of the row.
  EXPECT_GT(held, 0);
  EXPECT_LE(held, (o.heads + 2) * 4096);
  EXPECT_LT(held, row_bytes / 8);

  mha->ReleaseSlots(state, slot);
  EXPECT_EQ(state.length[3].item<int64_t>(), 0);
  EXPECT_LE(ResidentBytes(keys), 2 * 4096) << "the row's whole pages went back";
  EXPECT_EQ(keys[3].abs().max().item<float>(), 0.0f);
  EXPECT_EQ(state.tensors[1][3].abs().max().item<float>(), 0.0f);
}

// A row loaded into a released row (the state cache's hit) backs only the
// pages its positions need, however the copy prepares them, and continues
// as the saved row would.
TEST(KvCache, ALoadedRowHoldsOnlyItsPositionsPages) {
  torch::manual_seed(10);
  MixerOptions o = SmallOptions(MixerKind::kMha);
  o.max_context = 8192;
  MultiHeadAttention mha(o);
  mha->eval();
  torch::NoGradGuard no_grad;
  MixerState state = mha->initial_state(4, torch::kCPU);
  const torch::Tensor& keys = state.tensors[0];
  const torch::Tensor from = torch::tensor({1}, torch::kLong);
  const torch::Tensor to = torch::tensor({2}, torch::kLong);
  // 1,500 positions of 8 floats: 48,000 bytes a head, runs long enough to be
  // prepared in one call each.
  mha->prefill(torch::randn({1, 1500, o.d_model}), state, from);
  const MixerState saved = mha->SaveRow(state, 1);
  const torch::Tensor next = torch::randn({1, o.d_model});
  const torch::Tensor want = mha->step(next, state, from);
  mha->ReleaseSlots(state, torch::tensor({1, 2}, torch::kLong));
  ASSERT_LE(ResidentBytes(keys), 4 * 4096);

  mha->LoadRow(state, 2, saved);
  // Each head's 48,000 bytes span at most 13 pages; the row's capacity is 64.
  EXPECT_LE(ResidentBytes(keys), o.heads * 13 * 4096 + 4 * 4096);
  EXPECT_TRUE(torch::equal(mha->step(next, state, to), want));
}

}  // namespace
}  // namespace attn
