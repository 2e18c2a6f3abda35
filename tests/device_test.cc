// Every kind on the device a GPU build serves from, against float64 on the
// CPU: the parallel form, chunked prefill then steps, pool rows at different
// positions stepped together (eagerly and through CUDA graphs), bf16
// weights, and a context past 8,192 tokens; a mixture of experts; and
// public shapes' greedy decode against the CPU's. The device is ATTN_TEST_DEVICE (cpu, cuda or
// cuda:N); by default the first GPU where LibTorch sees one, else the CPU,
// so that the suite runs in every build: here it checks the CPU's fused
// kernels, on a GPU machine (scripts/gpu/device_run.sh) the op-by-op path
// and the CUDA kernels a GPU runs.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "model/backend/native_backend.h"
#include "model/backend/step_graphs.h"
#include "model/checkpoints/public_shapes.h"
#include "model/lm/language_model.h"
#include "tests/test_util.h"
#include "tests/tiny_model.h"

namespace attn {
namespace {

using testing::MaxAbsDiff;

constexpr int64_t kVocab = 61;
constexpr int64_t kRows = 3;
constexpr int64_t kTime = 59;
// float32 logits against float64 ones: the CPU tests' tolerance for two
// float32 forms (1e-5) with room for one more rounding order.
constexpr double kFloat32Tolerance = 2e-5;
// The same float64 arithmetic on two devices differs only in the order of
// sums (and the GPU's fused multiply-adds).
constexpr double kFloat64Tolerance = 1e-10;
// Bf16 weights and activations against float64 of the same rounded weights,
// relative to the logits' largest magnitude: each product's activations and
// outputs keep 8 significant bits (a relative rounding of at most 2^-9), the
// logits too. Every kind stayed within 0.0073 on the CPU (LibTorch 1.13's
// bf16 product): 2.7 times that.
constexpr double kBf16Tolerance = 0.02;

torch::Device TestDevice() {
  const char* named = std::getenv("ATTN_TEST_DEVICE");
  if (named != nullptr && *named != '\0') return torch::Device(named);
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
}

LmConfig DeviceConfig(MixerKind kind, int64_t max_context) {
  LmConfig c = testing::SmallLmConfig(kind, kVocab);
  c.window = 8;
  c.chunk = 16;
  c.max_context = max_context;
  if (kind == MixerKind::kMha || kind == MixerKind::kRelative) {
    c.positions = PositionKind::kSinusoidal;
  }
  // Learned positions, looked up on the device by the graphed steps too.
  if (kind == MixerKind::kLinearDecay || kind == MixerKind::kAftLocal) {
    c.positions = PositionKind::kLearned;
  }
  return c;
}

// Two models of one seed hold the same weights: one goes to the device, the
// other stays on the CPU as the reference.
CausalLm SeededModel(const LmConfig& config) {
  torch::manual_seed(71);
  CausalLm model(config);
  testing::RandomizePositionParameters(*model, 0.3);
  model->eval();
  return model;
}

class DeviceTest : public ::testing::TestWithParam<MixerKind> {
 protected:
  void SetUp() override {
    device_ = TestDevice();
    config_ = DeviceConfig(GetParam(), 128);
    reference_ = SeededModel(config_);
    reference_->to(torch::kDouble);
    model_ = SeededModel(config_);
    model_->to(device_);
    tokens_ = torch::randint(0, kVocab, {kRows, kTime}, torch::kLong);
    torch::NoGradGuard no_grad;
    expected_ = reference_->forward(tokens_);
  }

  torch::Device device_{torch::kCPU};
  LmConfig config_;
  CausalLm reference_{nullptr}, model_{nullptr};
  torch::Tensor tokens_, expected_;
};

TEST_P(DeviceTest, ParallelFormEqualsFloat64) {
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = model_->forward(tokens_.to(device_));
  EXPECT_EQ(logits.device(), device_);
  EXPECT_LT(MaxAbsDiff(logits.cpu(), expected_), kFloat32Tolerance) << "on " << device_;
}

TEST_P(DeviceTest, ChunkedPrefillThenStepsEqualFloat64) {
  torch::NoGradGuard no_grad;
  const torch::Tensor logits =
      testing::StreamedLogits(model_, tokens_.to(device_), device_, {17, 1, 20});
  EXPECT_LT(MaxAbsDiff(logits.cpu(), expected_), kFloat32Tolerance) << "on " << device_;
}

// Sequences in scattered rows of one pool, at different positions, stepped
// together as the engine's batches are (1 to 3 rows a step), by `step`
// (host tokens and rows [B] -> logits [B, V]); each sequence's logits.
std::vector<torch::Tensor> StepScatteredRows(
    const torch::Tensor& tokens,
    const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>& step) {
  const std::vector<int64_t> slot_of = {3, 0, 2}, start = {0, 4, 9};
  std::vector<std::vector<torch::Tensor>> logits(kRows);
  for (int64_t clock = 0; clock < kTime + start.back(); ++clock) {
    std::vector<int64_t> sequences, slots, ids;
    for (int64_t b = 0; b < kRows; ++b) {
      const int64_t t = clock - start[b];
      if (t < 0 || t >= kTime) continue;
      sequences.push_back(b);
      slots.push_back(slot_of[b]);
      ids.push_back(tokens[b][t].item<int64_t>());
    }
    const torch::Tensor out = step(torch::tensor(ids), torch::tensor(slots)).cpu();
    for (size_t i = 0; i < sequences.size(); ++i) logits[sequences[i]].push_back(out[i]);
  }
  std::vector<torch::Tensor> stacked;
  for (const auto& sequence : logits) stacked.push_back(torch::stack(sequence));
  return stacked;
}

// `model` on `device` streamed in chunks of 17, 1 and 20 tokens, and its
// pool rows stepped together (StepScatteredRows), against `expected`
// within `bound`.
void ExpectStreamedAndSteppedWithin(CausalLm& model, const torch::Tensor& tokens,
                                    const torch::Tensor& expected, torch::Device device,
                                    double bound) {
  const torch::Tensor streamed =
      testing::StreamedLogits(model, tokens.to(device), device, {17, 1, 20});
  EXPECT_LT(MaxAbsDiff(streamed.cpu(), expected), bound) << "streamed on " << device;
  LmState pool = model->initial_state(5, device);
  const std::vector<torch::Tensor> stepped =
      StepScatteredRows(tokens, [&](const torch::Tensor& ids, const torch::Tensor& slots) {
        return model->step(ids.to(device), slots, pool);
      });
  for (int64_t b = 0; b < kRows; ++b) {
    EXPECT_LT(MaxAbsDiff(stepped[b], expected[b]), bound) << "stepped, sequence " << b;
  }
}

// On a GPU, the step kernels' indexing of pool rows and the op-by-op
// path's batch of rows.
TEST_P(DeviceTest, PoolRowsAtDifferentPositionsStepTogether) {
  torch::NoGradGuard no_grad;
  LmState pool = model_->initial_state(5, device_);
  const std::vector<torch::Tensor> logits =
      StepScatteredRows(tokens_, [&](const torch::Tensor& ids, const torch::Tensor& slots) {
        return model_->step(ids.to(device_), slots, pool);
      });
  for (int64_t b = 0; b < kRows; ++b) {
    EXPECT_LT(MaxAbsDiff(logits[b], expected_[b]), kFloat32Tolerance)
        << "sequence " << b << " on " << device_;
  }
}

// `model`'s steps of StepScatteredRows through NativeBackend::Step, which
// captures and replays CUDA graphs (model/backend/step_graphs.h): a
// bucket's first batch runs eagerly, later ones replay its graph, and a
// batch of 3 pads to a bucket of 4 with a spare row. Host tokens and rows,
// as the engine passes them.
std::vector<torch::Tensor> GraphedSteps(const CausalLm& model, const torch::Tensor& tokens) {
  NativeBackend backend(model);
  EXPECT_TRUE(backend.AllocateRows(5).ok());
  EXPECT_NE(backend.graphs(), nullptr);
  if (backend.graphs() == nullptr) return {};
  const std::vector<torch::Tensor> logits =
      StepScatteredRows(tokens, [&](const torch::Tensor& ids, const torch::Tensor& slots) {
        absl::StatusOr<torch::Tensor> out = backend.Step(ids, slots);
        EXPECT_TRUE(out.ok()) << out.status();
        return out.ok() ? *out : torch::zeros({ids.size(0), kVocab});
      });
  EXPECT_EQ(backend.graphs()->failure(), "");
  EXPECT_EQ(backend.graphs()->graphs(), 3) << "buckets 1, 2 and 4";
  return logits;
}

TEST_P(DeviceTest, GraphedStepsEqualFloat64) {
  const std::string unavailable = StepGraphs::Unavailable(model_, device_);
  if (!unavailable.empty()) GTEST_SKIP() << "no CUDA graphs: " << unavailable;
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> logits = GraphedSteps(model_, tokens_);
  ASSERT_EQ(logits.size(), static_cast<size_t>(kRows));
  for (int64_t b = 0; b < kRows; ++b) {
    EXPECT_LT(MaxAbsDiff(logits[b], expected_[b]), kFloat32Tolerance)
        << "sequence " << b << " on " << device_;
  }
}

// Bf16 weights as a GPU serves them (Bf16Product::kLibTorch: LibTorch's
// bf16 product, cuBLAS's there, on weights that keep only their bf16
// values; on a CPU the same operations): the parallel form, streamed
// chunks, pool rows at different positions stepped together, and graphed
// steps against float64 of the same rounded weights, within kBf16Tolerance
// of the logits' largest magnitude. The activations' rounding is all that
// differs.
TEST_P(DeviceTest, Bf16WeightsStayWithinTheirTolerance) {
  torch::NoGradGuard no_grad;
  CausalLm rounded = SeededModel(config_);
  rounded->QuantizeBf16(Bf16Product::kLibTorch);
  rounded->to(torch::kDouble);
  const torch::Tensor expected = rounded->forward(tokens_);
  const double bound = kBf16Tolerance * expected.abs().max().item<double>();
  const int64_t float_bytes = model_->dense_weight_bytes();
  EXPECT_GT(model_->QuantizeBf16(Bf16Product::kLibTorch), 0);
  // The projections, embedding and head hold only their bf16 values now.
  EXPECT_LT(model_->dense_weight_bytes(), 0.6 * float_bytes);
  const double parallel = MaxAbsDiff(model_->forward(tokens_.to(device_)).cpu(), expected);
  EXPECT_LT(parallel, bound) << "parallel form on " << device_;
  EXPECT_GT(parallel, 1e-4) << "the products rounded nothing: the bf16 copies were not used";
  ExpectStreamedAndSteppedWithin(model_, tokens_, expected, device_, bound);
  if (!StepGraphs::Unavailable(model_, device_).empty()) return;
  const std::vector<torch::Tensor> graphed = GraphedSteps(model_, tokens_);
  ASSERT_EQ(graphed.size(), static_cast<size_t>(kRows));
  for (int64_t b = 0; b < kRows; ++b) {
    EXPECT_LT(MaxAbsDiff(graphed[b], expected[b]), bound) << "graphed, sequence " << b;
  }
}

// The device's own float64 arithmetic: the same operations as the CPU's,
// so nothing but rounding order may differ.
TEST_P(DeviceTest, Float64OnTheDeviceEqualsFloat64OnTheCpu) {
  if (device_.is_cpu()) GTEST_SKIP() << "the device is the CPU: the reference itself";
  torch::NoGradGuard no_grad;
  model_->to(torch::kDouble);
  EXPECT_LT(MaxAbsDiff(model_->forward(tokens_.to(device_)).cpu(), expected_), kFloat64Tolerance);
  const torch::Tensor streamed =
      testing::StreamedLogits(model_, tokens_.to(device_), device_, {17, 1, 20});
  EXPECT_LT(MaxAbsDiff(streamed.cpu(), expected_), kFloat64Tolerance);
}

// Past 8,192 tokens, where a recurrent state has decayed and been rescaled
// many times: chunks of 1,000 and steps on the device against the float64
// reference streamed the same way on the CPU (a whole parallel form would be
// quadratic for the softmax kinds, so both sides stream).
TEST_P(DeviceTest, AContextPast8192TokensStaysEqualToFloat64) {
  constexpr int64_t kLong = 8300;
  const LmConfig config = DeviceConfig(GetParam(), kLong + 1);
  CausalLm reference = SeededModel(config), model = SeededModel(config);
  reference->to(torch::kDouble);
  model->to(device_);
  const torch::Tensor tokens = torch::randint(0, kVocab, {1, kLong}, torch::kLong);
  std::vector<int64_t> chunks(8, 1000);
  chunks.push_back(290);
  torch::NoGradGuard no_grad;
  const torch::Tensor expected = testing::StreamedLogits(reference, tokens, torch::kCPU, chunks);
  const torch::Tensor logits =
      testing::StreamedLogits(model, tokens.to(device_), device_, chunks).cpu();
  for (int64_t t : {int64_t{0}, int64_t{4095}, int64_t{8191}, int64_t{8192}, kLong - 1}) {
    EXPECT_LT(MaxAbsDiff(logits.select(1, t), expected.select(1, t)), kFloat32Tolerance)
        << "at t=" << t << " on " << device_;
  }
}

// A gqa model with a mixture of experts beside each feed-forward: the
// parallel form (its rows grouped by expert on the host), streamed chunks,
// pool rows stepped together and graphed steps (on a GPU, the experts'
// kernel: the router's choices stay on the device) against float64 on the
// CPU. Float32 only: bf16's rounding moves router logits enough to swap
// experts at near-ties, which no tolerance covers.
TEST(DeviceExperts, EveryPathEqualsFloat64) {
  const torch::Device device = TestDevice();
  LmConfig config = DeviceConfig(MixerKind::kGqa, 128);
  config.moe.experts = 6;
  config.moe.top_k = 2;
  config.moe.hidden = 24;
  config.ff = FeedForwardKind::kSwiGlu;
  CausalLm reference = SeededModel(config), model = SeededModel(config);
  reference->to(torch::kDouble);
  model->to(device);
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::randint(0, kVocab, {kRows, kTime}, torch::kLong);
  const torch::Tensor expected = reference->forward(tokens);
  EXPECT_LT(MaxAbsDiff(model->forward(tokens.to(device)).cpu(), expected), kFloat32Tolerance);
  ExpectStreamedAndSteppedWithin(model, tokens, expected, device, kFloat32Tolerance);
  const std::string unavailable = StepGraphs::Unavailable(model, device);
  if (!unavailable.empty()) GTEST_SKIP() << "no CUDA graphs: " << unavailable;
  const std::vector<torch::Tensor> graphed = GraphedSteps(model, tokens);
  ASSERT_EQ(graphed.size(), static_cast<size_t>(kRows));
  for (int64_t b = 0; b < kRows; ++b) {
    EXPECT_LT(MaxAbsDiff(graphed[b], expected[b]), kFloat32Tolerance) << "graphed, sequence " << b;
  }
}

// A public shape with random weights (every matrix drawn, so that no block
// passes its input through as a new RWKV-7 block does), the same on both
// sides: seeded.
CausalLm RandomPublicModel(const std::string& shape) {
  absl::StatusOr<LmConfig> config = PublicShapeConfig(shape);
  EXPECT_TRUE(config.ok()) << config.status();
  torch::manual_seed(29);
  CausalLm model(*config);
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : model->parameters()) {
    if (p.dim() == 2) p.normal_(0.0, 1.0 / std::sqrt(static_cast<double>(p.size(1))));
  }
  model->eval();
  return model;
}

// The engine's batched greedy decode of public shapes (RWKV-7 0.1B, Mamba-2
// 130M) through the native backend on the device, its steps replaying CUDA
// graphs, against the same on the CPU: four rows prefilled with their own
// prompts, then 24 steps in which both sides are fed the CPU's greedy
// tokens. Every step's logits agree within 1e-3 of their largest
// magnitude, so the device picks the same tokens but where the CPU's best
// two are closer than that.
TEST(DevicePublicShapes, GreedyDecodeGivesTheCpusTokens) {
  const torch::Device device = TestDevice();
  if (device.is_cpu()) GTEST_SKIP() << "the device is the CPU: the reference itself";
  constexpr int64_t kStreams = 4, kPrompt = 16, kSteps = 24;
  for (const char* shape : {"rwkv7-0.1b", "mamba2-130m"}) {
    SCOPED_TRACE(shape);
    CausalLm on_cpu = RandomPublicModel(shape), on_device = RandomPublicModel(shape);
    on_device->to(device);
    torch::NoGradGuard no_grad;
    NativeBackend cpu(on_cpu), gpu(on_device);
    ASSERT_TRUE(cpu.AllocateRows(kStreams).ok());
    ASSERT_TRUE(gpu.AllocateRows(kStreams).ok());
    const torch::Tensor rows = torch::arange(kStreams, torch::kLong);
    const torch::Tensor prompt = torch::randint(0, cpu.vocab_size(), {kStreams, kPrompt});
    absl::StatusOr<torch::Tensor> expected = cpu.Prefill(prompt, rows, PrefillLogits::kLast);
    absl::StatusOr<torch::Tensor> got =
        gpu.Prefill(prompt.to(device), rows.to(device), PrefillLogits::kLast);
    ASSERT_TRUE(expected.ok() && got.ok()) << expected.status() << got.status();
    int64_t near_ties = 0;
    for (int64_t step = 0; step <= kSteps; ++step) {
      const torch::Tensor want = expected->reshape({kStreams, -1});
      const torch::Tensor have = got->reshape({kStreams, -1}).cpu();
      const double bound = 1e-3 * want.abs().max().item<double>();
      ASSERT_LT(MaxAbsDiff(have, want), bound) << "step " << step;
      const torch::Tensor tokens = want.argmax(1);
      const auto top2 = std::get<0>(want.topk(2, 1));
      const torch::Tensor gaps = top2.select(1, 0) - top2.select(1, 1);
      const torch::Tensor differ = have.argmax(1).ne(tokens);
      near_ties += differ.sum().item<int64_t>();
      EXPECT_TRUE(gaps.masked_select(differ).lt(bound).all().item<bool>())
          << "step " << step << ": another token where the CPU's best two are apart";
      if (step == kSteps) break;
      expected = cpu.Step(tokens, rows);
      got = gpu.Step(tokens, rows);
      ASSERT_TRUE(expected.ok() && got.ok()) << expected.status() << got.status();
    }
    EXPECT_LE(near_ties, 2) << "tokens chosen differently at near-ties";
    if (gpu.graphs() != nullptr) {
      EXPECT_EQ(gpu.graphs()->failure(), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryKind, DeviceTest, ::testing::ValuesIn(AllMixerKinds()),
                         testing::KindTestName<::testing::TestParamInfo<MixerKind>>);

}  // namespace
}  // namespace attn
