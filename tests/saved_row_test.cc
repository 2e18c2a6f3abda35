// SaveRow and LoadRow (CausalLm, SequenceMixer, NativeBackend): a sequence
// copied out of one row and into another, of another pool, continues
// exactly as it would have, for every mixer kind; a copy that does not fit
// is refused before anything is written; a row rolled back to a prefix of
// a checked chunk holds what feeding only that prefix leaves.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
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

// Every tensor of `row` equals the same tensor of `plain`, a plain copy.
void ExpectSameRow(const SavedRow& row, const SavedRow& plain) {
  ASSERT_EQ(row.tensors.size(), plain.tensors.size());
  for (size_t i = 0; i < row.tensors.size(); ++i) {
    ASSERT_EQ(row.tensors[i].sizes(), plain.tensors[i].sizes()) << "tensor " << i;
    EXPECT_TRUE(torch::equal(row.tensors[i], plain.tensors[i])) << "tensor " << i;
  }
}

// How many of `a`'s tensors view memory of `b`'s.
int SharedTensors(const SavedRow& a, const SavedRow& b) {
  int shared = 0;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    shared += a.tensors[i].storage().is_alias_of(b.tensors[i].storage()) ? 1 : 0;
  }
  return shared;
}

// A backend of two rows over a tiny model of `kind`, row 0 holding
// `history` tokens.
struct TwoRows {
  TwoRows(MixerKind kind, int64_t history) : model(testing::TinyModel(kind)), backend(model) {
    EXPECT_TRUE(backend.AllocateRows(2).ok());
    EXPECT_TRUE(backend.Prefill(Ids(history, 0), row0, PrefillLogits::kNone).ok());
  }
  CausalLm model;
  NativeBackend backend;
  const torch::Tensor row0 = torch::tensor({int64_t{0}});
  const torch::Tensor row1 = torch::tensor({int64_t{1}});
};

TEST_P(SavedRowTest, ASaveOntoAnEarlierCopyWritesOnlyWhatIsNew) {
  torch::NoGradGuard no_grad;
  TwoRows two(GetParam(), 3);
  NativeBackend& backend = two.backend;
  const torch::Tensor &row0 = two.row0, &row1 = two.row1;
  absl::StatusOr<SavedRow> first = backend.SaveRowOnto(0, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->length, 3);
  SavedRow first_values;  // what the first copy holds, kept apart
  for (const auto& t : first->tensors) first_values.tensors.push_back(t.clone());
  // A key/value cache (short-conv's is its attention layer's) shares the
  // memory of its keys and values; AFT's entries change as the sequence
  // goes on, so its copies, like every recurrent state, are whole.
  const MixerKind kind = GetParam();
  const bool grows = kind == MixerKind::kMha || kind == MixerKind::kMhaAlibi ||
                     kind == MixerKind::kRelative || kind == MixerKind::kGqa ||
                     kind == MixerKind::kShortConv;

  ASSERT_TRUE(backend.Step(torch::tensor({int64_t{9}}), row0).ok());
  absl::StatusOr<SavedRow> second = backend.SaveRowOnto(0, &*first);
  ASSERT_TRUE(second.ok()) << second.status();
  ExpectSameRow(*second, *backend.SaveRow(0));
  ExpectSameRow(*first, first_values);  // the earlier copy reads as before
  EXPECT_EQ(SharedTensors(*second, *first) > 0, grows);

  // Another continuation of the first copy must not write into the room
  // the second took: it gets memory of its own.
  ASSERT_TRUE(backend.LoadRow(1, *first).ok());
  ASSERT_TRUE(backend.Step(torch::tensor({int64_t{17}}), row1).ok());
  absl::StatusOr<SavedRow> branch = backend.SaveRowOnto(1, &*first);
  ASSERT_TRUE(branch.ok()) << branch.status();
  ExpectSameRow(*branch, *backend.SaveRow(1));
  EXPECT_EQ(SharedTensors(*branch, *first), 0);
  ExpectSameRow(*second, *backend.SaveRow(0));
  // The first copy moved onto the branch's memory holds the same values
  // there, and the branch's room is none of its own.
  absl::StatusOr<SavedRow> moved = backend.ViewOnto(*first, *first, *branch);
  ASSERT_TRUE(moved.ok()) << moved.status();
  ExpectSameRow(*moved, first_values);
  EXPECT_EQ(moved->length, first->length);
  EXPECT_EQ(SharedTensors(*moved, *branch) > 0, grows);
  EXPECT_EQ(moved->written == branch->written, grows);
  // A copy that views other memory than the source's stays as it is.
  absl::StatusOr<SavedRow> unmoved = backend.ViewOnto(first_values, *first, *branch);
  ASSERT_TRUE(unmoved.ok()) << unmoved.status();
  EXPECT_EQ(SharedTensors(*unmoved, *branch), 0);

  // The shared copy continues exactly as the row it came from.
  ASSERT_TRUE(backend.LoadRow(1, *second).ok());
  const torch::Tensor chunk = Ids(5, 40);
  absl::StatusOr<torch::Tensor> a = backend.Prefill(chunk, row0, PrefillLogits::kLast);
  absl::StatusOr<torch::Tensor> b = backend.Prefill(chunk, row1, PrefillLogits::kLast);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LE(MaxAbsDiff(*a, *b), 1e-6);
  // A third save onto the second: shared again where the second was.
  absl::StatusOr<SavedRow> third = backend.SaveRowOnto(0, &*second);
  ASSERT_TRUE(third.ok()) << third.status();
  ExpectSameRow(*third, *backend.SaveRow(0));
  EXPECT_EQ(SharedTensors(*third, *first) > 0, grows);
}

// Every state tensor of rows `a` and `b` of `backend`, and the logits after
// one more token, agree within rounding.
void ExpectRowsAgree(NativeBackend& backend, int64_t a, int64_t b) {
  absl::StatusOr<SavedRow> row_a = backend.SaveRow(a), row_b = backend.SaveRow(b);
  ASSERT_TRUE(row_a.ok() && row_b.ok());
  ASSERT_EQ(row_a->tensors.size(), row_b->tensors.size());
  for (size_t i = 0; i < row_a->tensors.size(); ++i) {
    ASSERT_EQ(row_a->tensors[i].sizes(), row_b->tensors[i].sizes()) << "tensor " << i;
    if (row_a->tensors[i].numel() == 0) continue;
    EXPECT_LE(MaxAbsDiff(row_a->tensors[i], row_b->tensors[i]), 1e-5) << "tensor " << i;
  }
  const torch::Tensor token = torch::tensor({int64_t{12}});
  absl::StatusOr<torch::Tensor> after_a = backend.Step(token, torch::tensor({a}));
  absl::StatusOr<torch::Tensor> after_b = backend.Step(token, torch::tensor({b}));
  ASSERT_TRUE(after_a.ok() && after_b.ok());
  EXPECT_LE(MaxAbsDiff(*after_a, *after_b), 1e-5);
}

// ReplayPrefix: the layers' recorded inputs for the first `kept` positions
// of a chunk advance the state as a prefill of those tokens alone does.
TEST_P(SavedRowTest, AReplayedPrefixEqualsFeedingItAlone) {
  torch::NoGradGuard no_grad;
  TwoRows two(GetParam(), 9);
  CausalLm& model = two.model;
  NativeBackend& backend = two.backend;
  const torch::Tensor &row0 = two.row0, &row1 = two.row1;
  const torch::Tensor chunk = Ids(7, 50);
  for (int64_t kept : {0, 1, 3, 7}) {
    SCOPED_TRACE(kept);
    absl::StatusOr<SavedRow> saved = backend.SaveRow(0);
    ASSERT_TRUE(saved.ok());
    ASSERT_TRUE(backend.LoadRow(1, *saved).ok());
    PrefillRecord record;
    const torch::Tensor checked =
        model->prefill(chunk, backend.state(), row0, PrefillLogits::kAll, &record);
    ASSERT_EQ(record.inputs.size(), static_cast<size_t>(model->config().layers));
    // RWKV-7's and Mamba-2's layers keep their updates' inputs, and a model
    // of only those replays only the updates.
    ASSERT_EQ(record.updates.size(), record.inputs.size());
    for (size_t l = 0; l < record.updates.size(); ++l) {
      const MixerKind kind = model->config().layer_mixer(static_cast<int64_t>(l));
      EXPECT_EQ(record.updates[l].empty(), kind != MixerKind::kRwkv7 && kind != MixerKind::kMamba2);
    }
    ASSERT_TRUE(backend.LoadRow(0, *saved).ok());
    model->ReplayPrefix(record, kept, backend.state());
    if (kept > 0) model->prefill(chunk.narrow(1, 0, kept), backend.state(), row1);
    ExpectRowsAgree(backend, 0, 1);
  }
  // Rows at other lengths than the recorded prefill's start are refused.
  PrefillRecord record;
  model->prefill(chunk, backend.state(), row0, PrefillLogits::kNone, &record);
  EXPECT_THROW(model->ReplayPrefix(record, 2, backend.state()), c10::Error);
}

// The backend's rollback replays its last check when the kept tokens are a
// prefix of it, and otherwise feeds them again: either way the row is what
// plain feeding leaves.
TEST_P(SavedRowTest, ARolledBackRowHoldsOnlyTheKeptTokens) {
  torch::NoGradGuard no_grad;
  TwoRows two(GetParam(), 9);
  NativeBackend& backend = two.backend;
  const std::vector<int64_t> checked = {11, 4, 33, 6, 21, 17};
  for (const std::vector<int64_t>& kept :
       {std::vector<int64_t>{11, 4, 33}, std::vector<int64_t>{11, 5}, checked}) {
    absl::StatusOr<SavedRow> whole = backend.SaveRow(0);
    ASSERT_TRUE(whole.ok());
    ASSERT_TRUE(backend.LoadRow(1, *whole).ok());
    // The round's copy leaves a key/value cache's positions in the row.
    absl::StatusOr<SavedRow> saved = backend.SaveRowForRollBack(0);
    ASSERT_TRUE(saved.ok());
    EXPECT_EQ(saved->bytes(),
              backend.rollback_bytes_per_sequence(backend.state().length()[0].item<int64_t>()));
    absl::StatusOr<torch::Tensor> logits = backend.PrefillForRollBack({0}, {checked});
    ASSERT_TRUE(logits.ok()) << logits.status();
    EXPECT_EQ(logits->size(1), static_cast<int64_t>(checked.size()));
    ASSERT_TRUE(backend.RollBackRow(0, *saved, kept).ok());
    ASSERT_TRUE(
        backend.Prefill(RowTokens(kept, torch::kCPU), RowIds(1, torch::kCPU), PrefillLogits::kNone)
            .ok());
    ExpectRowsAgree(backend, 0, 1);
  }
  // Where the copy leaves positions in the row, a copy longer than the row
  // cannot be the row's own, and is refused.
  if (backend.rollback_bytes_per_sequence(64) < backend.state_bytes_per_sequence(64)) {
    absl::StatusOr<SavedRow> longer = backend.SaveRowForRollBack(0);
    ASSERT_TRUE(longer.ok());
    ASSERT_TRUE(backend.ResetRow(0).ok());
    EXPECT_FALSE(backend.RollBackRow(0, *longer, {}).ok());
  }
}

// Rows checked in one prefill roll back each to its own prefix, replayed
// from its own part of the record, as feeding that prefix alone leaves it;
// a row whose kept tokens are not a prefix of what it was fed is fed them.
// The rows start at different lengths where the backend says a prefill
// may continue them so (and that prefill is refused where it says not).
TEST_P(SavedRowTest, RowsCheckedTogetherRollBackEachToItsOwnPrefix) {
  torch::NoGradGuard no_grad;
  CausalLm model = testing::TinyModel(GetParam());
  NativeBackend backend(model);
  ASSERT_TRUE(backend.AllocateRows(6).ok());
  const bool any_lengths = backend.PrefillsRowsAtAnyLengths();
  const auto rows = [](std::vector<int64_t> ids) { return torch::tensor(ids, torch::kLong); };
  ASSERT_TRUE(backend.Prefill(Ids(6, 0), rows({0}), PrefillLogits::kNone).ok());
  ASSERT_TRUE(backend.Prefill(Ids(any_lengths ? 9 : 6, 3), rows({1}), PrefillLogits::kNone).ok());
  // Rows 4 and 5 only show what the backend says of lengths.
  ASSERT_TRUE(backend.Prefill(Ids(4, 5), rows({4}), PrefillLogits::kNone).ok());
  EXPECT_EQ(
      backend.Prefill(torch::cat({Ids(2, 1), Ids(2, 2)}), rows({4, 5}), PrefillLogits::kNone).ok(),
      any_lengths);
  const std::vector<std::vector<int64_t>> checked = {{11, 4, 33, 6, 21}, {7, 8, 9, 10, 12}};
  const std::vector<std::vector<int64_t>> kept = {{11, 4}, {7, 13, 9}};
  std::vector<SavedRow> saved;
  for (int64_t row : {0, 1}) {
    absl::StatusOr<SavedRow> whole = backend.SaveRow(row);
    ASSERT_TRUE(whole.ok());
    ASSERT_TRUE(backend.LoadRow(row + 2, *whole).ok());  // rows 2 and 3: the twins
    absl::StatusOr<SavedRow> copy = backend.SaveRowForRollBack(row);
    ASSERT_TRUE(copy.ok());
    saved.push_back(*std::move(copy));
  }
  absl::StatusOr<torch::Tensor> logits = backend.PrefillForRollBack({0, 1}, checked);
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ(logits->sizes(), (std::vector<int64_t>{2, 5, backend.vocab_size()}));
  for (int64_t row : {1, 0}) {  // either order
    ASSERT_TRUE(backend.RollBackRow(row, saved[row], kept[row]).ok());
    ASSERT_TRUE(backend
                    .Prefill(RowTokens(kept[row], torch::kCPU), RowIds(row + 2, torch::kCPU),
                             PrefillLogits::kNone)
                    .ok());
    ExpectRowsAgree(backend, row, row + 2);
  }
  // Token lists of different lengths are refused, naming the rows.
  absl::StatusOr<torch::Tensor> ragged = backend.PrefillForRollBack({0, 1}, {{1, 2}, {3}});
  EXPECT_EQ(ragged.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ragged.status().message().find("row 1 has 1 tokens"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(EveryKind, SavedRowTest, ::testing::ValuesIn(AllMixerKinds()),
                         testing::KindTestName<::testing::TestParamInfo<MixerKind>>);

}  // namespace
}  // namespace attn
