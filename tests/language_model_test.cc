#include "model/lm/language_model.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/backend/native_backend.h"
#include "model/backend/row_pool.h"
#include "model/lm/row_groups.h"
#include "model/mixers/state_pool.h"
#include "tests/test_util.h"
#include "tests/tiny_model.h"

namespace attn {
namespace {

using testing::MaxAbsDiff;

constexpr double kLmTolerance = 1e-5;

LmConfig TinyConfig(MixerKind kind) {
  LmConfig c = testing::SmallLmConfig(kind, 61);
  c.window = 8;
  c.max_context = 128;
  c.chunk = 16;
  // Exercise every position kind somewhere.
  switch (kind) {
    case MixerKind::kMha:
      c.positions = PositionKind::kSinusoidal;
      break;
    case MixerKind::kLinearElu:
      c.positions = PositionKind::kLearned;
      break;
    default:
      c.positions = PositionKind::kNone;
  }
  return c;
}

class LanguageModelTest : public ::testing::TestWithParam<MixerKind> {
 protected:
  void SetUp() override {
    torch::manual_seed(71);
    model_ = CausalLm(TinyConfig(GetParam()));
    testing::RandomizePositionParameters(*model_, 0.3);
    model_->eval();
    tokens_ = torch::randint(0, 61, {3, 59}, torch::kLong);
    torch::NoGradGuard no_grad;
    logits_ = model_->forward(tokens_);
  }

  // The logits of a 20-token prefill and then a step per token, as a
  // stream computes them.
  torch::Tensor Streamed() {
    auto state = model_->initial_state(3, torch::kCPU);
    std::vector<torch::Tensor> outputs;
    outputs.push_back(model_->prefill(tokens_.narrow(1, 0, 20), state));
    for (int64_t t = 20; t < 59; ++t) {
      outputs.push_back(model_->step(tokens_.select(1, t), {}, state).unsqueeze(1));
    }
    return torch::cat(outputs, 1);
  }

  // The 2-D parameters named *weight: the ones int8 and bf16 quantise.
  std::vector<torch::Tensor> DenseWeights() const {
    std::vector<torch::Tensor> weights;
    for (const auto& p : model_->named_parameters()) {
      const std::string& name = p.key();
      if (p.value().dim() == 2 && name.size() >= 6 && name.substr(name.size() - 6) == "weight") {
        weights.push_back(p.value());
      }
    }
    return weights;
  }

  CausalLm model_{nullptr};
  torch::Tensor tokens_, logits_;
};

TEST_P(LanguageModelTest, StepAfterChunkedPrefillEqualsForward) {
  torch::NoGradGuard no_grad;
  auto state = model_->initial_state(3, torch::kCPU);
  std::vector<torch::Tensor> outputs;
  outputs.push_back(model_->prefill(tokens_.narrow(1, 0, 17), state));
  outputs.push_back(model_->prefill(tokens_.narrow(1, 17, 1), state));
  outputs.push_back(model_->prefill(tokens_.narrow(1, 18, 20), state));
  for (int64_t t = 38; t < 59; ++t) {
    outputs.push_back(model_->step(tokens_.select(1, t), {}, state).unsqueeze(1));
  }
  EXPECT_LT(MaxAbsDiff(torch::cat(outputs, 1), logits_), kLmTolerance);
  EXPECT_TRUE(state.length().eq(59).all().item<bool>());
}

// With int8 weights the decode steps (three rows) and the parallel forward
// (177 rows) both multiply the int8 copies, rounding each row's activations
// alike: the two must still agree, as Score and a stream must. (A
// projection that bypassed Dense in one form would differ by the
// activations' rounding, about the int8 model's distance from float.)
TEST_P(LanguageModelTest, Int8StepsEqualTheInt8ModelsForward) {
  torch::NoGradGuard no_grad;
  int64_t weights = 0, channels = 0;  // the projections' and the embedding's
  for (const torch::Tensor& w : DenseWeights()) {
    weights += w.numel();
    channels += w.size(0);
  }
  EXPECT_EQ(model_->dense_weight_bytes(), 4 * weights);
  auto bytes = QuantizeInt8(model_);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, weights + 4 * channels);
  const torch::Tensor quantised = model_->forward(tokens_);
  const double scale = logits_.abs().max().item<double>();
  EXPECT_GT(MaxAbsDiff(quantised, logits_), 1e-4);          // the weights did change,
  EXPECT_LT(MaxAbsDiff(quantised, logits_), 0.05 * scale);  // by a small step each
  EXPECT_LT(MaxAbsDiff(Streamed(), quantised), 1e-4);
}

// Bf16 weights: the model computes with the rounded weights and
// activations everywhere, and the decode steps equal the parallel forward
// but for the activations' rounding boundaries.
TEST_P(LanguageModelTest, Bf16StepsEqualTheBf16ModelsForward) {
  torch::NoGradGuard no_grad;
  int64_t weights = 0;
  for (const torch::Tensor& w : DenseWeights()) weights += w.numel();
  auto bytes = QuantizeBf16(model_);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, 2 * weights);
  for (const torch::Tensor& w : DenseWeights()) {  // now bf16 values: 16 zero low bits
    EXPECT_TRUE((w.view(torch::kInt).bitwise_and(0xFFFF) == 0).all().item<bool>());
  }
  const torch::Tensor rounded = model_->forward(tokens_);
  const double scale = logits_.abs().max().item<double>();
  EXPECT_GT(MaxAbsDiff(rounded, logits_), 1e-5);          // the weights did change,
  EXPECT_LT(MaxAbsDiff(rounded, logits_), 0.02 * scale);  // by a rounding each
  // Steps and forward multiply each row alike, but the mixers' recurrent
  // and parallel forms differ in float rounding, and where that difference
  // moves an activation across a bf16 rounding boundary, the activation
  // moves by one bf16 step (2^-8 of it), and so does what depends on it:
  // rarely, and never by much. A wrong state would move most logits.
  const torch::Tensor difference = (Streamed() - rounded).abs();
  EXPECT_LT(difference.max().item<double>(), 0.01 * scale);
  EXPECT_LT(difference.mean().item<double>(), 1e-4 * scale);
}

// How the server prefills a prompt: no logits for the earlier chunks, the
// last position's for the last one; the state goes on as after a full prefill.
TEST_P(LanguageModelTest, PrefillWithoutAllLogitsGivesTheLastPositionAndTheSameState) {
  torch::NoGradGuard no_grad;
  auto state = model_->initial_state(3, torch::kCPU);
  auto none = model_->prefill(tokens_.narrow(1, 0, 12), state, {}, PrefillLogits::kNone);
  EXPECT_FALSE(none.defined());
  auto last = model_->prefill(tokens_.narrow(1, 12, 18), state, {}, PrefillLogits::kLast);
  ASSERT_EQ(last.sizes(), torch::IntArrayRef({3, 1, logits_.size(2)}));
  EXPECT_LT(MaxAbsDiff(last, logits_.narrow(1, 29, 1)), kLmTolerance);
  auto next = model_->step(tokens_.select(1, 30), {}, state);  // the state went on as usual
  EXPECT_LT(MaxAbsDiff(next, logits_.select(1, 30)), kLmTolerance);
}

// Sequences at different positions share one batched step through a pool;
// each equals the model run on it alone, and one leaving changes no other.
TEST_P(LanguageModelTest, PooledSequencesEqualEachRunAlone) {
  torch::NoGradGuard no_grad;
  NativeBackend backend(model_);
  ASSERT_TRUE(backend.AllocateRows(5).ok());
  RowPool pool(backend);
  std::vector<int64_t> slot(3);
  std::vector<std::vector<torch::Tensor>> outputs(3);
  const std::vector<int64_t> prompt = {5, 11, 1};
  for (int64_t b = 0; b < 3; ++b) {
    auto acquired = pool.Acquire();
    ASSERT_TRUE(acquired.ok());
    slot[b] = *acquired;
    auto rows = torch::tensor({slot[b]}, torch::kLong);
    auto logits =
        model_->prefill(tokens_[b].narrow(0, 0, prompt[b]).unsqueeze(0), backend.state(), rows);
    outputs[b].push_back(logits[0]);
  }
  std::vector<int64_t> next = prompt;
  std::vector<bool> active = {true, true, true};
  for (int step = 0; step < 40; ++step) {
    if (step == 20) {  // sequence 1 leaves mid-way
      ASSERT_TRUE(pool.Release(slot[1]).ok());
      active[1] = false;
    }
    std::vector<int64_t> batch, rows, ids;
    for (int64_t b = 0; b < 3; ++b) {
      if (!active[b] || next[b] >= 59) continue;
      batch.push_back(b);
      rows.push_back(slot[b]);
      ids.push_back(tokens_[b][next[b]].item<int64_t>());
    }
    auto logits = model_->step(torch::tensor(ids, torch::kLong), torch::tensor(rows, torch::kLong),
                               backend.state());
    for (size_t n = 0; n < batch.size(); ++n) {
      outputs[batch[n]].push_back(logits[n].unsqueeze(0));
      ++next[batch[n]];
    }
  }
  for (int64_t b : {0, 2}) {
    auto got = torch::cat(outputs[b], 0);
    EXPECT_LT(MaxAbsDiff(got, logits_[b].narrow(0, 0, got.size(0))), kLmTolerance) << "seq " << b;
  }
  EXPECT_EQ(pool.in_use(), 2);
}

// A step of many rows with two intra-op threads runs in groups of rows, one
// per thread (CausalLm::step); each sequence still equals the parallel form,
// whatever pool rows it holds, and the threads keep the caller's no-grad mode.
// forward() and prefill() split their feed-forward halves into row groups the
// same way, while a grouped step's layers do not, so a group that read the
// wrong rows would show here as well.
TEST_P(LanguageModelTest, GroupedStepOfManyRowsEqualsForward) {
  const int previous_threads = at::get_num_threads();
  at::set_num_threads(2);
  torch::NoGradGuard no_grad;
  constexpr int64_t kRows = 40, kPrompt = 6, kSteps = 9;
  auto tokens = torch::randint(0, 61, {kRows, kPrompt + kSteps}, torch::kLong);
  auto expected = model_->forward(tokens);
  // Sequence b holds pool row kRows + 3 - 1 - b: reversed, three rows unused.
  auto state = model_->initial_state(kRows + 3, torch::kCPU);
  auto slots = torch::arange(kRows + 2, 2, -1, torch::kLong);
  std::vector<torch::Tensor> outputs = {
      model_->prefill(tokens.narrow(1, 0, kPrompt), state, slots)};
  for (int64_t t = kPrompt; t < kPrompt + kSteps; ++t) {
    auto logits = model_->step(tokens.select(1, t), slots, state);
    EXPECT_FALSE(logits.requires_grad());
    outputs.push_back(logits.unsqueeze(1));
  }
  at::set_num_threads(previous_threads);
  EXPECT_LT(MaxAbsDiff(torch::cat(outputs, 1), expected), kLmTolerance);
  EXPECT_TRUE(state.length().narrow(0, 3, kRows).eq(kPrompt + kSteps).all().item<bool>());
  EXPECT_TRUE(state.length().narrow(0, 0, 3).eq(0).all().item<bool>());
}

// Float32 layers above kMaxGroupedWeightBytes step their rows as one batch,
// each product split across the threads, and prefill their feed-forward
// halves as one batch, whose products take more than kDensePackedMaxRows
// rows in slices: a step of 40 rows and a 300-token chunk (two slices)
// still equal the parallel form. Int8 copies bring the groups back.
TEST(LanguageModelRowGroups, LargeFloatLayersStepAsOneBatchAndEqualForward) {
  const int previous_threads = at::get_num_threads();
  at::set_num_threads(2);
  torch::manual_seed(5);
  LmConfig config = testing::SmallLmConfig(MixerKind::kAftSimple, 61);
  config.d_model = 512;
  config.ff_hidden = 8192;
  config.layers = 4;
  CausalLm model(config);
  model->eval();
  EXPECT_GT(model->parameter_count() * 4, kMaxGroupedWeightBytes);
  EXPECT_FALSE(model->row_groups());
  constexpr int64_t kRows = 40, kPrompt = 4, kSteps = 3, kLong = 300;
  const torch::Tensor tokens = torch::randint(0, 61, {kRows, kPrompt + kSteps}, torch::kLong);
  const torch::Tensor prompt = torch::randint(0, 61, {1, kLong}, torch::kLong);
  // The references with autograd on, where nothing runs in slices or groups.
  const torch::Tensor expected = model->forward(tokens).detach();
  const torch::Tensor expected_prompt = model->forward(prompt).detach();
  torch::NoGradGuard no_grad;
  auto state = model->initial_state(kRows, torch::kCPU);
  std::vector<torch::Tensor> outputs = {model->prefill(tokens.narrow(1, 0, kPrompt), state)};
  for (int64_t t = kPrompt; t < kPrompt + kSteps; ++t) {
    outputs.push_back(model->step(tokens.select(1, t), {}, state).unsqueeze(1));
  }
  const double scale = expected.abs().max().item<double>();
  EXPECT_LT(MaxAbsDiff(torch::cat(outputs, 1), expected), kLmTolerance * scale);
  auto one = model->initial_state(1, torch::kCPU);
  EXPECT_LT(MaxAbsDiff(model->prefill(prompt, one), expected_prompt), kLmTolerance * scale);
  EXPECT_LT(MaxAbsDiff(model->forward(prompt), expected_prompt), kLmTolerance * scale);
  ASSERT_GT(model->QuantizeInt8(), 0);
  EXPECT_TRUE(model->row_groups());
  at::set_num_threads(previous_threads);
}

INSTANTIATE_TEST_SUITE_P(AllMixers, LanguageModelTest, ::testing::ValuesIn(AllMixerKinds()),
                         testing::KindTestName<::testing::TestParamInfo<MixerKind>>);

TEST(RowPool, HandsOutEveryRowOnceThenRefuses) {
  NativeBackend backend(CausalLm(TinyConfig(MixerKind::kAftSimple)));
  ASSERT_TRUE(backend.AllocateRows(2).ok());
  RowPool pool(backend);
  auto a = pool.Acquire(), b = pool.Acquire(), c = pool.Acquire();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(pool.Release(*a).ok());
  EXPECT_EQ(pool.Release(*a).code(), absl::StatusCode::kInvalidArgument);  // twice
  EXPECT_EQ(pool.Release(7).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(pool.Acquire().ok());
}

// The most recently returned row keeps its memory until another row is
// returned (row_pool.h); the next sequence takes it first, reset, and runs
// as on a fresh row although its old keys are still in the pages.
TEST(RowPool, TheLastReturnedRowKeepsItsMemoryUntilAnotherIsReturned) {
  torch::NoGradGuard no_grad;
  LmConfig config = TinyConfig(MixerKind::kMha);
  config.max_context = 4096;
  NativeBackend backend{CausalLm(config)};
  NativeBackend fresh(backend.model());  // the same weights, rows of its own
  ASSERT_TRUE(backend.AllocateRows(4).ok() && fresh.AllocateRows(1).ok());
  RowPool pool(backend);
  const torch::Tensor keys = backend.state().layers[0].tensors[0];
  torch::manual_seed(4);
  const auto prompt = torch::randint(0, config.vocab_size, {1, 300}, torch::kLong);
  auto a = pool.Acquire(), b = pool.Acquire();
  ASSERT_TRUE(a.ok() && b.ok());
  for (int64_t row : {*a, *b}) {
    ASSERT_TRUE(backend.Prefill(prompt, torch::tensor({row}), PrefillLogits::kNone).ok());
  }
  const int64_t both = ResidentBytes(keys);
  ASSERT_GT(both, 0);
  ASSERT_TRUE(pool.Release(*a).ok());
  EXPECT_EQ(ResidentBytes(keys), both) << "the last returned row keeps its pages";
  ASSERT_TRUE(pool.Release(*b).ok());
  const int64_t one = ResidentBytes(keys);
  EXPECT_GT(one, 0);
  EXPECT_LE(one, both / 2 + 2 * 4096) << "the row returned before it gave its pages back";

  auto c = pool.Acquire();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, *b) << "the row still mapped is taken first";
  EXPECT_EQ(backend.state().layers[0].length[*c].item<int64_t>(), 0) << "and reset";
  const auto other = torch::randint(0, config.vocab_size, {1, 40}, torch::kLong);
  auto got = backend.Prefill(other, torch::tensor({*c}), PrefillLogits::kAll);
  auto expected = fresh.Prefill(other, torch::tensor({int64_t{0}}), PrefillLogits::kAll);
  ASSERT_TRUE(got.ok() && expected.ok());
  EXPECT_LT(MaxAbsDiff(*got, *expected), kLmTolerance);
}

TEST(CausalLm, ReportsStateSizeByKind) {
  // aft-simple: 3 vectors of d_model per layer, whatever the context.
  CausalLm simple(TinyConfig(MixerKind::kAftSimple));
  EXPECT_EQ(simple->state_bytes_per_sequence(4096), simple->state_bytes_per_sequence(64));
  EXPECT_EQ(simple->max_context(), -1);
  CausalLm mha(TinyConfig(MixerKind::kMha));
  EXPECT_GT(mha->state_bytes_per_sequence(100), mha->state_bytes_per_sequence(10));
  EXPECT_EQ(mha->max_context(), 128);
}

TEST(CausalLm, RefusesTokensOutsideTheVocabulary) {
  CausalLm model(TinyConfig(MixerKind::kAftConv));
  try {
    model->forward(torch::tensor({{1, 61}}, torch::kLong));
    FAIL() << "a token id of vocab_size must be refused";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 61 outside the vocabulary"), std::string::npos);
  }
}

}  // namespace
}  // namespace attn
