// SaveRow and LoadRow (CausalLm, SequenceMixer, NativeBackend): a sequence
// copied out of one row and into another, of another pool, continues
// exactly as it would have, for every mixer kind; a copy that does not fit
// is refused before anything is written.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "model/backend/native_backend.h"
#include "tests/test_util.h"
#include "tests/tiny_model.h"

namespace attn {
namespace {

using testing::MaxAbsDiff;

torch::Tensor Ids(int64_t length, int64_t offset) {
  std::vector<int64_t> ids(length);
  for (int64_t i = 0; i < length; ++i) ids[i] = 3 + (offset + i * 31) % 200;
  return torch::tensor(ids, torch::kLong).view({1, length});
}

class SavedRowTest : public ::testing::TestWithParam<MixerKind> {};

TEST_P(SavedRowTest, ALoadedRowContinuesExactlyAsTheSavedOne) {
  torch::NoGradGuard no_grad;
  CausalLm model = testing::TinyModel(GetParam());
  LmState from = model->initial_state(3, torch::kCPU);
  LmState to = model->initial_state(2, torch::kCPU);
  const torch::Tensor row2 = torch::tensor({int64_t{2}});
  const torch::Tensor row1 = torch::tensor({int64_t{1}});
  // Some history: a chunk, then steps (rows at different lengths).
  model->prefill(Ids(11, 0), from, row2);
  for (int64_t t = 0; t < 3; ++t) model->step(torch::tensor({5 + t}), row2, from);
  model->prefill(Ids(4, 9), to, row1);  // whatever row 1 held is replaced

  std::vector<torch::Tensor> saved = model->SaveRow(from, 2);
  model->LoadRow(to, 1, saved);
  EXPECT_EQ(to.length()[1].item<int64_t>(), 14);

  const torch::Tensor chunk = Ids(6, 40);
  const torch::Tensor a = model->prefill(chunk, from, row2);
  const torch::Tensor b = model->prefill(chunk, to, row1);
  EXPECT_LE(MaxAbsDiff(a, b), 1e-6);
  for (int64_t t = 0; t < 4; ++t) {
    const torch::Tensor token = torch::tensor({11 + t});
    EXPECT_LE(MaxAbsDiff(model->step(token, row2, from), model->step(token, row1, to)), 1e-6);
  }
  // A copy holds what the row holds at its length, no more.
  int64_t bytes = 0;
  for (const auto& t : saved) bytes += t.numel() * t.element_size();
  EXPECT_EQ(bytes, model->state_bytes_per_sequence(14));
}

TEST_P(SavedRowTest, ACopyThatDoesNotFitIsRefusedBeforeWriting) {
  torch::NoGradGuard no_grad;
  CausalLm model = testing::TinyModel(GetParam());
  NativeBackend backend(model);
  ASSERT_TRUE(backend.AllocateRows(2).ok());
  ASSERT_TRUE(backend.Prefill(Ids(5, 1), torch::tensor({int64_t{0}}), PrefillLogits::kNone).ok());
  absl::StatusOr<SavedRow> saved = backend.SaveRow(0);
  ASSERT_TRUE(saved.ok()) << saved.status();

  SavedRow short_one = *saved;
  short_one.tensors.pop_back();
  EXPECT_EQ(backend.LoadRow(1, short_one).code(), absl::StatusCode::kInvalidArgument);
  SavedRow reshaped = *saved;
  reshaped.tensors.back() = torch::zeros({1, 3});
  EXPECT_EQ(backend.LoadRow(1, reshaped).code(), absl::StatusCode::kInvalidArgument);
  SavedRow uneven = *saved;
  uneven.tensors[0] = torch::tensor({int64_t{4}});  // layer 0 at another length
  EXPECT_EQ(backend.LoadRow(1, uneven).code(), absl::StatusCode::kInvalidArgument);
  if (model->max_context() > 0) {
    SavedRow too_long = *saved;
    for (auto& t : too_long.tensors) {
      if (t.dim() == 1 && t.scalar_type() == torch::kLong) t = torch::tensor({int64_t{1} << 40});
    }
    EXPECT_EQ(backend.LoadRow(1, too_long).code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(backend.LoadRow(1, *saved).ok());
}

INSTANTIATE_TEST_SUITE_P(EveryKind, SavedRowTest, ::testing::ValuesIn(AllMixerKinds()),
                         testing::KindTestName<::testing::TestParamInfo<MixerKind>>);

}  // namespace
}  // namespace attn
