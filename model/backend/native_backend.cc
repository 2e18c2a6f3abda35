#include "model/backend/native_backend.h"

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "model/backend/guarded.h"
#include "model/checkpoints/rwkv7_checkpoint.h"

namespace attn {
using backend_internal::Guarded;
using backend_internal::GuardedCall;

NativeBackend::NativeBackend(CausalLm model)
    : model_(std::move(model)), device_(model_->parameters().front().device()) {}

std::unique_ptr<LmBackend> NativeBackend::ShareWeights() const {
  return std::make_unique<NativeBackend>(model_);
}

absl::Status NativeBackend::AllocateRows(int64_t rows) {
  check_.reset();
  graphs_.reset();
  return GuardedCall("allocating state rows", [&] {
    const bool graphs = StepGraphs::Unavailable(model_, device_).empty();
    state_ = model_->initial_state(graphs ? rows + StepGraphs::kSpareRows : rows, device_);
    rows_ = rows;
    if (graphs) graphs_ = std::make_unique<StepGraphs>(model_, device_, rows);
  });
}

absl::Status NativeBackend::ResetRow(int64_t row) {
  ForgetCheckOf(row);
  return GuardedCall("resetting a state row",
                     [&] { model_->ResetSlots(state_, torch::tensor({row}, torch::kLong)); });
}

absl::Status NativeBackend::ReleaseRow(int64_t row) {
  ForgetCheckOf(row);
  return GuardedCall("releasing a state row",
                     [&] { model_->ReleaseSlots(state_, torch::tensor({row}, torch::kLong)); });
}

absl::StatusOr<SavedRow> NativeBackend::SaveRow(int64_t row) {
  return Guarded("saving a state row", [&] {
    return SavedRow{model_->SaveRow(state_, row), nullptr, 0};
  });
}

absl::StatusOr<SavedRow> NativeBackend::SaveRowOnto(int64_t row, const SavedRow* base) {
  return Guarded("saving a state row", [&] {
    TORCH_CHECK(row >= 0 && row < rows_, "SaveRow: row ", row, " of ", rows_);
    const int64_t length = state_.length()[row].item<int64_t>();
    if (base != nullptr && base->written != nullptr &&
        model_->FitsInto(state_, row, base->tensors)) {
      int64_t expected = base->length;
      if (base->written->compare_exchange_strong(expected, length)) {
        return SavedRow{model_->SaveRowInto(state_, row, base->tensors), base->written, length};
      }
    }
    // Room for the next turns of a conversation: a quarter more, at least
    // kMinRoom positions, so that copies happen once every few turns.
    constexpr int64_t kMinRoom = 256;
    const int64_t room = std::max(kMinRoom, length / 4);
    return SavedRow{model_->SaveRow(state_, row, room),
                    std::make_shared<std::atomic<int64_t>>(length), length};
  });
}

absl::StatusOr<SavedRow> NativeBackend::ViewOnto(const SavedRow& prefix, const SavedRow& source,
                                                 const SavedRow& copy) const {
  return Guarded("moving a cached state", [&] {
    SavedRow moved = prefix;
    moved.tensors = model_->ViewOnto(state_, prefix.tensors, source.tensors, copy.tensors);
    for (size_t i = 0; i < moved.tensors.size(); ++i) {
      if (moved.tensors[i].is_same(prefix.tensors[i])) continue;
      moved.written = copy.written;  // one moved tensor makes the copy's room the row's
      break;
    }
    return moved;
  });
}

absl::Status NativeBackend::LoadRow(int64_t row, const SavedRow& saved) {
  try {
    std::vector<torch::Tensor> tensors;
    for (const auto& t : saved.tensors) tensors.push_back(t.to(device_));
    model_->LoadRow(state_, row, tensors);
    return absl::OkStatus();
  } catch (const c10::Error& error) {
    return absl::InvalidArgumentError(error.what_without_backtrace());
  }
}

absl::StatusOr<torch::Tensor> NativeBackend::Prefill(const torch::Tensor& tokens,
                                                     const torch::Tensor& rows,
                                                     PrefillLogits logits) {
  return Guarded("prefill", [&] { return model_->prefill(tokens, state_, rows, logits); });
}

absl::StatusOr<torch::Tensor> NativeBackend::Step(const torch::Tensor& tokens,
                                                  const torch::Tensor& rows) {
  return Guarded("decode step", [&] {
    if (graphs_ != nullptr) {
      if (std::optional<torch::Tensor> logits = graphs_->Step(tokens, rows, state_)) {
        return *std::move(logits);
      }
    }
    return model_->step(tokens, rows, state_);
  });
}

absl::StatusOr<torch::Tensor> NativeBackend::PrefillForRollBack(
    const std::vector<int64_t>& rows, const std::vector<std::vector<int64_t>>& tokens) {
  check_.reset();
  absl::StatusOr<torch::Tensor> fed = RowsTokens(rows, tokens, device_);
  if (!fed.ok()) return fed.status();
  return Guarded("prefill", [&] {
    Check check{rows, tokens, {}, std::vector<bool>(rows.size(), false)};
    torch::Tensor logits =
        model_->prefill(*fed, state_, RowsIds(rows, device_), PrefillLogits::kAll, &check.record);
    check_ = std::move(check);
    return logits;
  });
}

bool NativeBackend::PrefillsRowsAtAnyLengths() const {
  // Recurrences: no layer of these kinds places tokens by position (the
  // attention and AFT kinds do).
  constexpr MixerKind kPositionFree[] = {
      MixerKind::kLinearElu, MixerKind::kLinearExp, MixerKind::kLinearDecay, MixerKind::kRwkv7,
      MixerKind::kRwkv4,     MixerKind::kMamba2,    MixerKind::kShortConv};
  const LmConfig& config = model_->config();
  for (int64_t l = 0; l < config.layers; ++l) {
    if (std::find(std::begin(kPositionFree), std::end(kPositionFree), config.layer_mixer(l)) ==
        std::end(kPositionFree)) {
      return false;
    }
  }
  return true;
}

int64_t NativeBackend::ReplayableIndex(int64_t row, const std::vector<int64_t>& kept) const {
  if (!check_.has_value()) return -1;
  for (size_t i = 0; i < check_->rows.size(); ++i) {
    if (check_->rows[i] != row || check_->used[i]) continue;
    const std::vector<int64_t>& fed = check_->tokens[i];
    const bool prefix =
        kept.size() <= fed.size() && std::equal(kept.begin(), kept.end(), fed.begin());
    return prefix ? static_cast<int64_t>(i) : -1;
  }
  return -1;
}

void NativeBackend::ForgetCheckOf(int64_t row) {
  if (!check_.has_value()) return;
  for (size_t i = 0; i < check_->rows.size(); ++i) {
    if (check_->rows[i] == row) check_->used[i] = true;
  }
  // The layer inputs are freed once no row can replay them.
  if (std::all_of(check_->used.begin(), check_->used.end(), [](bool used) { return used; })) {
    check_.reset();
  }
}

absl::StatusOr<SavedRow> NativeBackend::SaveRowForRollBack(int64_t row) {
  return Guarded("saving a state row", [&] {
    return SavedRow{model_->SaveRowForRollBack(state_, row), nullptr, 0};
  });
}

absl::Status NativeBackend::RollBackRow(int64_t row, const SavedRow& saved,
                                        const std::vector<int64_t>& kept) {
  std::optional<PrefillRecord> replay;
  if (const int64_t i = ReplayableIndex(row, kept); i >= 0) {
    const PrefillRecord& all = check_->record;
    replay = PrefillRecord{all.rows.narrow(0, i, 1), all.start.narrow(0, i, 1), {}, {}};
    for (const torch::Tensor& input : all.inputs) replay->inputs.push_back(input.narrow(0, i, 1));
    for (const std::vector<torch::Tensor>& layer : all.updates) {
      std::vector<torch::Tensor>& kept = replay->updates.emplace_back();
      for (const torch::Tensor& t : layer) kept.push_back(t.narrow(0, i, 1));
    }
  }
  ForgetCheckOf(row);
  return GuardedCall("rolling back a state row", [&] {
    model_->RestoreRow(state_, row, saved.tensors);
    if (replay.has_value()) {
      model_->ReplayPrefix(*replay, static_cast<int64_t>(kept.size()), state_);
    } else if (!kept.empty()) {
      model_->prefill(RowTokens(kept, device_), state_, RowIds(row, device_), PrefillLogits::kNone);
    }
  });
}

absl::StatusOr<SavedRow> NativeBackend::ReadInitialState(const std::string& path) const {
  if (model_->config().mixer != MixerKind::kRwkv7) return LmBackend::ReadInitialState(path);
  absl::StatusOr<std::vector<torch::Tensor>> tensors =
      ReadRwkv7InitialState(path, model_->config());
  if (!tensors.ok()) return tensors.status();
  SavedRow row;
  row.tensors = *std::move(tensors);
  return row;
}

}  // namespace attn
