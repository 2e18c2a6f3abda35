// The decode step's CUDA graphs (model/backend/step_graphs.h) on the host:
// buckets, padding with spare rows, the reasons graphs do not apply, and,
// with a capturer that reruns the captured step at every replay (a graph's
// semantics: the same tensors, its buffers' new values), that replays on
// the CPU's op path give the eager steps' logits and leave the engine's rows
// as the eager steps do. A GPU build's device_tests replay real graphs.
#include "model/backend/step_graphs.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/backend/native_backend.h"
#include "model/cuda/state_kernels.h"
#include "tests/test_util.h"
#include "tests/tiny_model.h"

namespace attn {
namespace {

using testing::Int64s;

using testing::MaxAbsDiff;

TEST(StepGraphs, EveryBatchPadsToABucketWithinTheSpareRows) {
  EXPECT_EQ(StepGraphs::BucketFor(1), 1);
  EXPECT_EQ(StepGraphs::BucketFor(2), 2);
  EXPECT_EQ(StepGraphs::BucketFor(3), 4);
  EXPECT_EQ(StepGraphs::BucketFor(5), 8);
  EXPECT_EQ(StepGraphs::BucketFor(9), 16);
  EXPECT_EQ(StepGraphs::BucketFor(StepGraphs::kMaxBatch), StepGraphs::kMaxBatch);
  EXPECT_EQ(StepGraphs::BucketFor(StepGraphs::kMaxBatch + 1), 0);
  EXPECT_EQ(StepGraphs::BucketFor(0), 0);
  for (int64_t batch = 1; batch <= StepGraphs::kMaxBatch; ++batch) {
    const int64_t bucket = StepGraphs::BucketFor(batch);
    ASSERT_GE(bucket, batch);
    ASSERT_LE(bucket - batch, StepGraphs::kSpareRows) << "batch " << batch;
  }
}

TEST(StepGraphs, PaddingTakesTheSpareRowsAndTokenZero) {
  const auto padded =
      step_graphs_internal::PadStep(torch::tensor({7, 8, 9}), torch::tensor({4, 0, 2}), 8, 10);
  EXPECT_EQ(Int64s(padded.tokens), (std::vector<int64_t>{7, 8, 9, 0, 0, 0, 0, 0}));
  EXPECT_EQ(Int64s(padded.rows), (std::vector<int64_t>{4, 0, 2, 10, 11, 12, 13, 14}));
  const auto exact = step_graphs_internal::PadStep(torch::tensor({5}), torch::tensor({3}), 1, 10);
  EXPECT_EQ(Int64s(exact.rows), (std::vector<int64_t>{3}));
  EXPECT_THROW(step_graphs_internal::PadStep(torch::tensor({5}), torch::tensor({3}), 16, 10),
               c10::Error);
}

// Models whose steps size their work by the rows' lengths on the host, or
// route rows there, are not captured; AFT and attention are, where their
// kernels run, and positions, sinusoidal or learned.
TEST(StepGraphs, RecurrentModelsAreCapturedAndOthersWithTheirKernels) {
  using step_graphs_internal::WhyNotCapturable;
  for (const bool kernels : {false, true}) {
    SCOPED_TRACE(kernels ? "with the kernels" : "without the kernels");
    EXPECT_EQ(WhyNotCapturable(testing::TinyConfig(MixerKind::kMamba2), kernels), "");
    EXPECT_EQ(WhyNotCapturable(testing::TinyConfig(MixerKind::kAftDecay), kernels), "");
    LmConfig learned = testing::TinyConfig(MixerKind::kRwkv7);
    learned.positions = PositionKind::kLearned;
    EXPECT_EQ(WhyNotCapturable(learned, kernels), "");
    LmConfig experts = testing::TinyConfig(MixerKind::kRwkv7);
    experts.moe.experts = 4;
    EXPECT_EQ(WhyNotCapturable(experts, kernels),
              kernels ? ""
                      : "a mixture of experts without the fused CUDA kernels routes its rows "
                        "on the host");
  }
  EXPECT_EQ(WhyNotCapturable(testing::TinyConfig(MixerKind::kShortConv), true), "");
  EXPECT_NE(WhyNotCapturable(testing::TinyConfig(MixerKind::kShortConv), false)
                .find("layer 1 is gqa, whose step without the fused CUDA kernels sizes"),
            std::string::npos);
  for (const MixerKind kind :
       {MixerKind::kAftConv, MixerKind::kAftLocal, MixerKind::kAftFull, MixerKind::kAftSimple,
        MixerKind::kMha, MixerKind::kMhaAlibi, MixerKind::kRelative, MixerKind::kGqa}) {
    const LmConfig config = testing::TinyConfig(kind);  // mha's, relative's: sinusoidal
    EXPECT_EQ(WhyNotCapturable(config, true), "") << MixerKindName(kind);
    EXPECT_NE(WhyNotCapturable(config, false)
                  .find(absl::StrCat("layer 0 is ", MixerKindName(kind),
                                     ", whose step without the fused CUDA kernels")),
              std::string::npos);
  }
}

// The experts' kernel takes at most 256 choices a call: graphs serve a
// mixture of experts up to the bucket whose rows choose no more.
TEST(StepGraphs, AMixtureOfExpertsIsCapturedUpToTheKernelsChoices) {
  using step_graphs_internal::LargestBucket;
  LmConfig config = testing::TinyConfig(MixerKind::kRwkv7);
  EXPECT_EQ(LargestBucket(config), StepGraphs::kMaxBatch);
  config.moe.experts = 64;
  const std::vector<std::pair<int64_t, int64_t>> top_k_bucket = {
      {1, 256}, {2, 128}, {6, 40}, {8, 32}, {40, 4}, {64, 4}, {80, 2}, {100, 2}, {256, 1}};
  for (const auto& [top_k, bucket] : top_k_bucket) {
    config.moe.top_k = top_k;
    EXPECT_EQ(LargestBucket(config), bucket) << "top " << top_k;
    EXPECT_EQ(StepGraphs::BucketFor(bucket), bucket);
    EXPECT_LE(bucket * top_k, cuda::kMaxExpertChoices);
    EXPECT_GT(StepGraphs::BucketFor(bucket + 1) * top_k, cuda::kMaxExpertChoices);
  }
}

// A CPU model gets no graphs, and its backend no spare rows.
TEST(StepGraphs, TheCpuStepsEagerly) {
  CausalLm model(testing::TinyConfig(MixerKind::kRwkv7));
  EXPECT_FALSE(StepGraphs::Unavailable(model, torch::kCPU).empty());
  NativeBackend backend(model);
  ASSERT_TRUE(backend.AllocateRows(3).ok());
  EXPECT_EQ(backend.graphs(), nullptr);
  EXPECT_EQ(backend.rows(), 3);
  EXPECT_EQ(backend.state().rows(), 3);
}

// Runs the captured step again at every replay, as a graph would.
class Rerun : public CapturedStep {
 public:
  explicit Rerun(std::function<torch::Tensor()> step) : step_(std::move(step)) {}
  void Replay() override { logits_ = step_(); }
  const torch::Tensor& logits() const override { return logits_; }

 private:
  std::function<torch::Tensor()> step_;
  torch::Tensor logits_;
};

// Counts its captures; fails each with `error` when that is not empty.
StepCapturer RerunCapturer(int* captures, std::string error = "") {
  return [captures, error](const std::function<torch::Tensor()>& step, CapturedStep* /*share*/,
                           std::string* why) -> std::unique_ptr<CapturedStep> {
    ++*captures;
    if (!error.empty()) {
      *why = error;
      return nullptr;
    }
    return std::make_unique<Rerun>(step);
  };
}

constexpr int64_t kRows = 3;

// A float64 model: the CPU runs its op-by-op step, which a GPU captures
// (or, for AFT, the kernel that does the same to the same rows).
CausalLm Float64Model(MixerKind kind) {
  CausalLm model = testing::TinyModel(kind, 13);
  model->to(torch::kDouble);
  return model;
}

// A pool of `rows` rows in the model's float64.
LmState Float64Pool(const CausalLm& model, int64_t rows) {
  LmState state = model->initial_state(rows, torch::kCPU);
  for (MixerState& layer : state.layers) {
    for (torch::Tensor& t : layer.tensors) {
      if (t.is_floating_point()) t = t.to(torch::kDouble);
    }
  }
  return state;
}

class StepGraphsReplayTest : public ::testing::TestWithParam<MixerKind> {};

// Attention is not among the kinds: its op-by-op step, the CPU's, finds
// positions by the host ids, which a capture's only stand in for; its
// captured step is the GPU kernel's (device_tests).
//
// Three sequences in scattered rows, joining at different times: batches
// of 1, 2 and 3 rows (3 padded to 4 with a spare), each bucket run eagerly
// once, then captured and replayed.
void ExpectReplaysToFollowTheEagerSteps(CausalLm model) {
  torch::NoGradGuard no_grad;
  ASSERT_EQ(step_graphs_internal::WhyNotCapturable(model->config(), /*kernels=*/true), "");
  int captures = 0;
  StepGraphs graphs(model, torch::kCPU, kRows, RerunCapturer(&captures));
  LmState eager = Float64Pool(model, kRows);
  LmState graphed = Float64Pool(model, kRows + StepGraphs::kSpareRows);
  const std::vector<int64_t> slot_of = {2, 0, 1}, start = {0, 3, 6};
  const int64_t time = 12;
  const torch::Tensor tokens = torch::randint(0, model->config().vocab_size, {kRows, time});
  int64_t replays = 0;
  for (int64_t clock = 0; clock < time + start.back(); ++clock) {
    std::vector<int64_t> slots, ids;
    for (int64_t b = 0; b < kRows; ++b) {
      const int64_t t = clock - start[b];
      if (t < 0 || t >= time) continue;
      slots.push_back(slot_of[b]);
      ids.push_back(tokens[b][t].item<int64_t>());
    }
    const torch::Tensor id_tensor = torch::tensor(ids), slot_tensor = torch::tensor(slots);
    const torch::Tensor expected = model->step(id_tensor, slot_tensor, eager);
    std::optional<torch::Tensor> replayed = graphs.Step(id_tensor, slot_tensor, graphed);
    replays += replayed.has_value();
    const torch::Tensor got =
        replayed.has_value() ? *replayed : model->step(id_tensor, slot_tensor, graphed);
    ASSERT_LT(MaxAbsDiff(got, expected), 1e-12) << "at clock " << clock;
  }
  EXPECT_EQ(graphs.failure(), "");
  EXPECT_EQ(captures, 3) << "buckets 1, 2 and 4";
  EXPECT_EQ(graphs.graphs(), 3);
  EXPECT_EQ(replays, 18 - 3) << "18 steps, the first of each bucket eager";
  const torch::Tensor rows = torch::arange(kRows);
  for (size_t l = 0; l < eager.layers.size(); ++l) {
    EXPECT_EQ(Int64s(graphed.layers[l].length.index_select(0, rows)),
              Int64s(eager.layers[l].length));
    for (size_t i = 0; i < eager.layers[l].tensors.size(); ++i) {
      if (eager.layers[l].tensors[i].numel() == 0) continue;  // aft-simple's empty ring
      EXPECT_LT(MaxAbsDiff(graphed.layers[l].tensors[i].index_select(0, rows),
                           eager.layers[l].tensors[i]),
                1e-12)
          << "layer " << l << ", tensor " << i;
    }
  }
}

TEST_P(StepGraphsReplayTest, ReplaysGiveTheEagerStepsAndLeaveTheRowsAsTheyDo) {
  ExpectReplaysToFollowTheEagerSteps(Float64Model(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Captured, StepGraphsReplayTest,
                         ::testing::Values(MixerKind::kRwkv7, MixerKind::kRwkv4, MixerKind::kMamba2,
                                           MixerKind::kLinearElu, MixerKind::kLinearDecay,
                                           MixerKind::kAftDecay, MixerKind::kAftConv,
                                           MixerKind::kAftLocal, MixerKind::kAftFull,
                                           MixerKind::kAftSimple),
                         testing::KindTestName<::testing::TestParamInfo<MixerKind>>);

// Sinusoidal positions are computed from the rows' lengths on the device,
// the replayed rows' (a spare row's too, however far past the context).
TEST(StepGraphs, SinusoidalPositionsComeFromTheReplayedRows) {
  LmConfig config = testing::TinyConfig(MixerKind::kLinearElu);
  config.positions = PositionKind::kSinusoidal;
  torch::manual_seed(13);
  CausalLm model(config);
  model->to(torch::kDouble);
  ExpectReplaysToFollowTheEagerSteps(model);
}

// A mixture of experts beside each feed-forward: its replays follow the
// eager steps (on the CPU the rows are grouped on the host inside the
// rerun; a GPU captures the experts' kernel).
LmConfig WithExperts(int64_t experts, int64_t top_k) {
  LmConfig config = testing::TinyConfig(MixerKind::kLinearDecay);
  config.ff = FeedForwardKind::kSwiGlu;
  config.moe = {experts, top_k, 6};
  return config;
}

TEST(StepGraphs, AMixtureOfExpertsReplaysTheEagerSteps) {
  torch::manual_seed(13);
  CausalLm model(WithExperts(4, 2));
  model->to(torch::kDouble);
  ExpectReplaysToFollowTheEagerSteps(model);
}

// Past its largest bucket (2 rows at top 100 of 200 experts) a batch steps
// eagerly, however often it comes; the buckets below replay.
TEST(StepGraphs, AMixturesBatchPastItsLargestBucketStepsEagerly) {
  torch::manual_seed(13);
  CausalLm model(WithExperts(200, 100));
  ASSERT_EQ(step_graphs_internal::LargestBucket(model->config()), 2);
  model->to(torch::kDouble);
  torch::NoGradGuard no_grad;
  int captures = 0;
  StepGraphs graphs(model, torch::kCPU, kRows, RerunCapturer(&captures));
  LmState state = Float64Pool(model, kRows + StepGraphs::kSpareRows);
  for (int64_t round = 0; round < 3; ++round) {
    EXPECT_FALSE(graphs
                     .Step(torch::tensor({int64_t{1}, int64_t{2}, int64_t{3}}),
                           torch::tensor({int64_t{0}, int64_t{1}, int64_t{2}}), state)
                     .has_value())
        << "3 rows, round " << round;
    EXPECT_EQ(graphs
                  .Step(torch::tensor({int64_t{4}, int64_t{5}}),
                        torch::tensor({int64_t{0}, int64_t{2}}), state)
                  .has_value(),
              round > 0)
        << "2 rows, round " << round;
  }
  EXPECT_EQ(captures, 1);
}

// A model bounded by its context: Step() checks the engine's rows against
// it before each replay, since a replay runs no layer's check, while the
// spare row that pads every batch of 3 runs on past the context without
// disturbing anyone. `config.max_context` is 6.
void ExpectBoundedRowsCheckedBeforeEachReplay(const LmConfig& config) {
  ASSERT_EQ(config.max_context, 6);
  torch::manual_seed(13);
  CausalLm model(config);
  testing::RandomizePositionParameters(*model, 0.3);
  model->to(torch::kDouble);
  torch::NoGradGuard no_grad;
  constexpr int64_t kPoolRows = 6;
  int captures = 0;
  StepGraphs graphs(model, torch::kCPU, kPoolRows, RerunCapturer(&captures));
  LmState eager = Float64Pool(model, kPoolRows);
  LmState graphed = Float64Pool(model, kPoolRows + StepGraphs::kSpareRows);
  // Rows 0-2 to the context, then rows 3-5: the spare row (6) steps 11
  // times, 5 past the context.
  for (const int64_t first : {0, 3}) {
    const torch::Tensor rows = torch::arange(first, first + 3);
    for (int64_t t = 0; t < config.max_context; ++t) {
      const torch::Tensor ids = torch::randint(0, config.vocab_size, {3}, torch::kLong);
      const torch::Tensor expected = model->step(ids, rows, eager);
      std::optional<torch::Tensor> replayed = graphs.Step(ids, rows, graphed);
      const torch::Tensor got = replayed.has_value() ? *replayed : model->step(ids, rows, graphed);
      ASSERT_LT(MaxAbsDiff(got, expected), 1e-12) << "rows from " << first << ", at " << t;
    }
  }
  EXPECT_EQ(captures, 1);
  EXPECT_EQ(Int64s(graphed.layers[0].length.narrow(0, kPoolRows, 1)), std::vector<int64_t>{11});
  const torch::Tensor full = torch::tensor({int64_t{4}, int64_t{1}});
  EXPECT_THROW(model->step(torch::tensor({int64_t{1}, int64_t{2}}), full, eager), c10::Error);
  try {
    graphs.Step(torch::tensor({int64_t{1}, int64_t{2}}), full, graphed);
    ADD_FAILURE() << "a row at the context stepped";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what_without_backtrace())
                  .find("at most 6 tokens per sequence; the sequence in row 4, at 6"),
              std::string::npos)
        << error.what_without_backtrace();
  }
}

// aft-local's bias table has a row per position.
TEST(StepGraphs, ABoundedModelsRowsAreCheckedBeforeEachReplay) {
  LmConfig config = testing::TinyConfig(MixerKind::kAftLocal);
  config.max_context = 6;
  ExpectBoundedRowsCheckedBeforeEachReplay(config);
}

// Learned positions bound a model of recurrences: a replay looks them up
// on the device without the host check of the eager lookup, the spare
// row's past the table taking its last row.
TEST(StepGraphs, LearnedPositionsAreLookedUpOnTheDeviceWithinTheirTable) {
  LmConfig config = testing::TinyConfig(MixerKind::kLinearDecay);
  config.positions = PositionKind::kLearned;
  config.max_context = 6;
  ExpectBoundedRowsCheckedBeforeEachReplay(config);
}

// A failed capture turns graphs off for good, saying why; a pool
// reallocated since a capture is captured again.
TEST(StepGraphs, AFailedCaptureTurnsThemOffAndANewPoolIsCapturedAgain) {
  CausalLm model = Float64Model(MixerKind::kRwkv7);
  torch::NoGradGuard no_grad;
  const torch::Tensor one = torch::tensor({int64_t{1}}), row = torch::tensor({int64_t{0}});
  int failed = 0;
  StepGraphs broken(model, torch::kCPU, 1, RerunCapturer(&failed, "no room"));
  LmState pool = Float64Pool(model, 1 + StepGraphs::kSpareRows);
  EXPECT_FALSE(broken.Step(one, row, pool).has_value());  // the bucket's eager run
  EXPECT_FALSE(broken.Step(one, row, pool).has_value());
  EXPECT_EQ(broken.failure(), "capturing a step of 1 rows: no room");
  EXPECT_FALSE(broken.Step(one, row, pool).has_value());
  EXPECT_EQ(failed, 1);

  int captures = 0;
  StepGraphs graphs(model, torch::kCPU, 1, RerunCapturer(&captures));
  EXPECT_FALSE(graphs.Step(one, row, pool).has_value());
  EXPECT_TRUE(graphs.Step(one, row, pool).has_value());
  pool = Float64Pool(model, 1 + StepGraphs::kSpareRows);
  EXPECT_FALSE(graphs.Step(one, row, pool).has_value()) << "replayed on a pool since freed";
  EXPECT_TRUE(graphs.Step(one, row, pool).has_value());
  EXPECT_EQ(captures, 2);
  EXPECT_THROW(graphs.Step(torch::tensor({int64_t{1}}), torch::tensor({int64_t{1}}), pool),
               c10::Error)
      << "a spare row is not the engine's";
}

// Replays check the pool's addresses in place: any tensor moved, added or
// missing is a different pool.
TEST(StepGraphs, APoolIsAtTheAddressesItWasCapturedWith) {
  using step_graphs_internal::StateAddresses;
  using step_graphs_internal::StateAt;
  CausalLm model = Float64Model(MixerKind::kMamba2);
  LmState pool = Float64Pool(model, 2);
  const std::vector<const void*> addresses = StateAddresses(pool);
  ASSERT_GT(addresses.size(), 2u);
  EXPECT_TRUE(StateAt(pool, addresses));
  std::vector<const void*> shorter(addresses.begin(), addresses.end() - 1);
  EXPECT_FALSE(StateAt(pool, shorter));
  std::vector<const void*> longer = addresses;
  longer.push_back(nullptr);
  EXPECT_FALSE(StateAt(pool, longer));
  pool.layers.back().tensors.back() = pool.layers.back().tensors.back().clone();
  EXPECT_FALSE(StateAt(pool, addresses));
  EXPECT_TRUE(StateAt(pool, StateAddresses(pool)));
}

}  // namespace
}  // namespace attn
