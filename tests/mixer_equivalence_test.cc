// The product's central promise: for every mixer, the recurrent forms
// (step token by token, prefill in chunks, any mix of them, rows of a slot
// pool at different positions) equal the causal parallel form.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/mixers/mixer.h"
#include "tests/test_util.h"

namespace attn {
namespace {

using testing::MaxAbsDiff;
using testing::SmallOptions;

constexpr double kTolerance = 1e-5;  // float32, as the product promises
constexpr int64_t kBatch = 3;
constexpr int64_t kTime = 101;  // > 100, odd, not a multiple of the chunk

struct Case {
  MixerKind kind;
  bool fused;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return testing::TestName(info.param.kind) + (info.param.fused ? "_fused" : "_generic");
}

class MixerEquivalenceTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    torch::manual_seed(7);
    auto options = SmallOptions(GetParam().kind);
    options.fused_kernels = GetParam().fused;
    mixer_ = MakeMixer(options);
    testing::RandomizePositionParameters(*mixer_);
    mixer_->eval();
    x_ = torch::randn({kBatch, kTime, options.d_model});
    torch::NoGradGuard no_grad;
    parallel_ = mixer_->forward(x_);
  }

  std::shared_ptr<SequenceMixer> mixer_;
  torch::Tensor x_, parallel_;
};

TEST_P(MixerEquivalenceTest, StepTokenByTokenEqualsParallel) {
  torch::NoGradGuard no_grad;
  auto state = mixer_->initial_state(kBatch, torch::kCPU);
  for (int64_t t = 0; t < kTime; ++t) {
    auto y = mixer_->step(x_.select(1, t), state);
    ASSERT_LT(MaxAbsDiff(y, parallel_.select(1, t)), kTolerance) << "at t=" << t;
  }
  EXPECT_TRUE(state.length.eq(kTime).all().item<bool>());
}

TEST_P(MixerEquivalenceTest, ChunkedPrefillThenStepsEqualsParallel) {
  torch::NoGradGuard no_grad;
  auto state = mixer_->initial_state(kBatch, torch::kCPU);
  std::vector<torch::Tensor> outputs;
  int64_t t = 0;
  for (int64_t chunk : {17, 1, 40, 5}) {  // crosses window and block edges
    outputs.push_back(mixer_->prefill(x_.narrow(1, t, chunk), state));
    t += chunk;
  }
  for (; t < kTime; ++t) outputs.push_back(mixer_->step(x_.select(1, t), state).unsqueeze(1));
  EXPECT_LT(MaxAbsDiff(torch::cat(outputs, 1), parallel_), kTolerance);
}

TEST_P(MixerEquivalenceTest, StepsThenPrefillEqualsParallel) {
  torch::NoGradGuard no_grad;
  auto state = mixer_->initial_state(kBatch, torch::kCPU);
  std::vector<torch::Tensor> outputs;
  for (int64_t t = 0; t < 11; ++t) {
    outputs.push_back(mixer_->step(x_.select(1, t), state).unsqueeze(1));
  }
  outputs.push_back(mixer_->prefill(x_.narrow(1, 11, kTime - 11), state));
  EXPECT_LT(MaxAbsDiff(torch::cat(outputs, 1), parallel_), kTolerance);
}

// prefill_last keeps the last `keep` outputs of a chunk, and the state it
// leaves is the full prefill's: none kept, then some (crossing blocks and the
// window, with a short tile of queries in mha's kernel), then all.
TEST_P(MixerEquivalenceTest, PrefillLastKeepsTheLastOutputsAndTheWholeState) {
  torch::NoGradGuard no_grad;
  auto state = mixer_->initial_state(kBatch, torch::kCPU);
  auto none = mixer_->prefill_last(x_.narrow(1, 0, 23), state, {}, 0);
  EXPECT_EQ(none.sizes(), torch::IntArrayRef({kBatch, 0, x_.size(2)}));
  std::vector<torch::Tensor> outputs;
  int64_t t = 23;
  for (auto [chunk, keep] : {std::pair<int64_t, int64_t>{40, 1}, {19, 6}, {3, 3}}) {
    auto y = mixer_->prefill_last(x_.narrow(1, t, chunk), state, {}, keep);
    ASSERT_EQ(y.size(1), keep);
    EXPECT_LT(MaxAbsDiff(y, parallel_.narrow(1, t + chunk - keep, keep)), kTolerance)
        << "chunk at " << t;
    t += chunk;
  }
  EXPECT_TRUE(state.length.eq(t).all().item<bool>());
  for (; t < kTime; ++t) {
    ASSERT_LT(MaxAbsDiff(mixer_->step(x_.select(1, t), state), parallel_.select(1, t)), kTolerance)
        << "step at t=" << t;
  }
  EXPECT_THROW(mixer_->prefill_last(x_.narrow(1, 0, 2), state, {}, 3), c10::Error);
}

// Rows of one pool at different positions, stepped together through
// scattered slot indices; rows not named are never touched.
TEST_P(MixerEquivalenceTest, PoolRowsAtDifferentPositionsStepTogether) {
  torch::NoGradGuard no_grad;
  constexpr int64_t kRows = 6;
  const std::vector<int64_t> slot_of = {4, 0, 2};  // sequence b lives in row slot_of[b]
  const std::vector<int64_t> start = {0, 7, 30};   // sequence b joins at step start[b]
  auto pool = mixer_->initial_state(kRows, torch::kCPU);
  auto untouched = GatherState(pool, torch::tensor({1, 3, 5}));
  std::vector<std::vector<torch::Tensor>> outputs(kBatch);
  for (int64_t clock = 0; clock < kTime + 30; ++clock) {
    std::vector<int64_t> batch, slots;
    std::vector<torch::Tensor> inputs;
    for (int64_t b = 0; b < kBatch; ++b) {
      const int64_t t = clock - start[b];
      if (t < 0 || t >= kTime) continue;
      batch.push_back(b);
      slots.push_back(slot_of[b]);
      inputs.push_back(x_[b][t]);
    }
    if (batch.empty()) continue;
    auto y = mixer_->step(torch::stack(inputs), pool, torch::tensor(slots));
    for (size_t n = 0; n < batch.size(); ++n) outputs[batch[n]].push_back(y[n]);
  }
  for (int64_t b = 0; b < kBatch; ++b) {
    EXPECT_LT(MaxAbsDiff(torch::stack(outputs[b]), parallel_[b]), kTolerance) << "sequence " << b;
  }
  auto after = GatherState(pool, torch::tensor({1, 3, 5}));
  for (size_t i = 0; i < after.tensors.size(); ++i) {
    EXPECT_TRUE(after.tensors[i].equal(untouched.tensors[i])) << "state tensor " << i;
  }
}

// A sequence that leaves (its row reset) and a new one that takes the row
// behave as if the row were fresh; the neighbours do not notice.
// Prompts of sequences living in scattered pool rows, prefilled together in
// chunks; rows not named are never touched.
TEST_P(MixerEquivalenceTest, PrefillIntoScatteredSlotsEqualsParallel) {
  torch::NoGradGuard no_grad;
  auto pool = mixer_->initial_state(6, torch::kCPU);
  auto untouched = GatherState(pool, torch::tensor({1, 3, 5}));
  const auto slots = torch::tensor({4, 0, 2});
  std::vector<torch::Tensor> outputs;
  int64_t t = 0;
  for (int64_t chunk : {17, 40, 44}) {
    outputs.push_back(mixer_->prefill(x_.narrow(1, t, chunk), pool, slots));
    t += chunk;
  }
  EXPECT_LT(MaxAbsDiff(torch::cat(outputs, 1), parallel_), kTolerance);
  auto after = GatherState(pool, torch::tensor({1, 3, 5}));
  for (size_t i = 0; i < after.tensors.size(); ++i) {
    EXPECT_TRUE(after.tensors[i].equal(untouched.tensors[i])) << "state tensor " << i;
  }
  EXPECT_TRUE(pool.length.index_select(0, slots).eq(t).all().item<bool>());
}

TEST_P(MixerEquivalenceTest, ResetRowStartsAFreshSequence) {
  torch::NoGradGuard no_grad;
  auto pool = mixer_->initial_state(2, torch::kCPU);
  for (int64_t t = 0; t < 20; ++t) mixer_->step(x_.select(1, t).narrow(0, 0, 2), pool);
  mixer_->ResetSlots(pool, torch::tensor({0}));
  std::vector<torch::Tensor> fresh, neighbour;
  for (int64_t t = 0; t < 30; ++t) {
    auto input = torch::stack({x_[2][t], x_[1][20 + t]});
    auto y = mixer_->step(input, pool);
    fresh.push_back(y[0]);
    neighbour.push_back(y[1]);
  }
  EXPECT_LT(MaxAbsDiff(torch::stack(fresh), parallel_[2].narrow(0, 0, 30)), kTolerance);
  EXPECT_LT(MaxAbsDiff(torch::stack(neighbour), parallel_[1].narrow(0, 20, 30)), kTolerance);
}

// A reset row must not see what it held before, whatever reads it next
// (a cache may keep stale entries past the row's length).
TEST_P(MixerEquivalenceTest, ResetRowThenPrefillStartsAFreshSequence) {
  torch::NoGradGuard no_grad;
  auto pool = mixer_->initial_state(2, torch::kCPU);
  mixer_->prefill(x_.narrow(0, 0, 2).narrow(1, 0, 40), pool);
  mixer_->ResetSlots(pool, torch::tensor({1}));
  auto prefilled = mixer_->prefill(x_.narrow(0, 2, 1).narrow(1, 0, 17), pool, torch::tensor({1}));
  std::vector<torch::Tensor> outputs = {prefilled[0]};
  for (int64_t t = 17; t < 25; ++t) {
    outputs.push_back(mixer_->step(x_[2][t].unsqueeze(0), pool, torch::tensor({1})));
  }
  EXPECT_LT(MaxAbsDiff(torch::cat(outputs, 0), parallel_[2].narrow(0, 0, 25)), kTolerance);
}

TEST_P(MixerEquivalenceTest, StateBytesMatchTheKind) {
  const int64_t at_64 = mixer_->state_bytes_per_sequence(64);
  const int64_t at_4096 = mixer_->state_bytes_per_sequence(4096);
  switch (GetParam().kind) {
    case MixerKind::kAftSimple:
    case MixerKind::kAftConv:
    case MixerKind::kAftDecay:
    case MixerKind::kAftLocal:
    case MixerKind::kLinearElu:
    case MixerKind::kLinearExp:
    case MixerKind::kLinearDecay:
    case MixerKind::kRwkv7:
    case MixerKind::kRwkv4:
    case MixerKind::kMamba2:
    case MixerKind::kShortConv:
      EXPECT_EQ(at_64, at_4096);  // constant once past the window
      break;
    default:
      EXPECT_GT(at_4096, at_64);  // a cache that grows with the context
  }
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (auto kind : AllMixerKinds()) {
    cases.push_back({kind, true});
    cases.push_back({kind, false});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllMixers, MixerEquivalenceTest, ::testing::ValuesIn(AllCases()),
                         CaseName);

TEST(MixerContract, NamesRoundTrip) {
  for (auto kind : AllMixerKinds()) {
    MixerKind parsed;
    ASSERT_TRUE(ParseMixerKind(MixerKindName(kind), &parsed));
    EXPECT_EQ(parsed, kind);
  }
  MixerKind unused;
  EXPECT_FALSE(ParseMixerKind("transformer", &unused));
}

TEST(MixerContract, BoundedMixerRefusesTokensPastItsContext) {
  torch::NoGradGuard no_grad;
  auto options = SmallOptions(MixerKind::kMha);
  options.max_context = 4;
  auto mixer = MakeMixer(options);
  auto state = mixer->initial_state(1, torch::kCPU);
  mixer->prefill(torch::randn({1, 4, options.d_model}), state);
  try {
    mixer->step(torch::randn({1, options.d_model}), state);
    FAIL() << "step past max_context must throw";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 4 tokens"), std::string::npos) << e.what();
  }
}

TEST(MixerContract, BadOptionsAreRefused) {
  auto options = SmallOptions(MixerKind::kAftConv);
  options.heads = 5;  // 32 is not divisible by 5
  EXPECT_THROW(MakeMixer(options), c10::Error);
}

TEST(MixerContract, ASlotNamedTwiceInOneCallIsRefused) {
  torch::NoGradGuard no_grad;
  for (MixerKind kind : {MixerKind::kAftConv, MixerKind::kLinearElu, MixerKind::kMha}) {
    auto mixer = MakeMixer(SmallOptions(kind));
    auto state = mixer->initial_state(4, torch::kCPU);
    const auto twice = torch::tensor({2, 1, 2});
    EXPECT_THROW(mixer->step(torch::randn({3, 32}), state, twice), c10::Error)
        << MixerKindName(kind);
    EXPECT_THROW(mixer->prefill(torch::randn({3, 5, 32}), state, twice), c10::Error)
        << MixerKindName(kind);
  }
}

TEST(MixerContract, SlotsOutOfRangeAreRefused) {
  torch::NoGradGuard no_grad;
  auto mixer = MakeMixer(SmallOptions(MixerKind::kAftSimple));
  auto state = mixer->initial_state(2, torch::kCPU);
  EXPECT_THROW(mixer->step(torch::randn({1, 32}), state, torch::tensor({2})), c10::Error);
}

}  // namespace
}  // namespace attn
