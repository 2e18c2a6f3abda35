// LmBackend over this library's CausalLm: its fused CPU kernels, its
// LmState rows, the key/value cache that gives pages back.
#pragma once

#include <optional>
#include <vector>

#include "model/backend/backend.h"
#include "model/backend/step_graphs.h"

namespace attn {

class NativeBackend : public LmBackend {
 public:
  // `model` in eval mode, on the device it will run on.
  explicit NativeBackend(CausalLm model);

  BackendKind kind() const override { return BackendKind::kNative; }
  torch::Device device() const override { return device_; }
  int64_t vocab_size() const override { return model_->config().vocab_size; }
  int64_t max_context() const override { return model_->max_context(); }
  int64_t state_bytes_per_sequence(int64_t context) const override {
    return model_->state_bytes_per_sequence(context);
  }

  absl::Status AllocateRows(int64_t rows) override;
  // The rows the engine uses; with CUDA graphs the pool holds
  // StepGraphs::kSpareRows more after them, to pad batches with.
  int64_t rows() const override { return rows_; }
  int64_t bytes_per_row() const override { return state_.bytes_per_row(); }
  absl::Status ResetRow(int64_t row) override;
  absl::Status ReleaseRow(int64_t row) override;

  absl::StatusOr<SavedRow> SaveRow(int64_t row) override;
  absl::StatusOr<SavedRow> SaveRowOnto(int64_t row, const SavedRow* base) override;
  absl::StatusOr<SavedRow> ViewOnto(const SavedRow& prefix, const SavedRow& source,
                                    const SavedRow& copy) const override;
  absl::Status LoadRow(int64_t row, const SavedRow& saved) override;

  absl::StatusOr<torch::Tensor> Prefill(const torch::Tensor& tokens, const torch::Tensor& rows,
                                        PrefillLogits logits) override;
  absl::StatusOr<torch::Tensor> Step(const torch::Tensor& tokens,
                                     const torch::Tensor& rows) override;
  absl::StatusOr<SavedRow> SaveRowForRollBack(int64_t row) override;
  int64_t rollback_bytes_per_sequence(int64_t context) const override {
    return model_->rollback_bytes_per_sequence(context);
  }
  absl::StatusOr<torch::Tensor> PrefillForRollBack(
      const std::vector<int64_t>& rows, const std::vector<std::vector<int64_t>>& tokens) override;
  bool PrefillsRowsAtAnyLengths() const override;
  absl::Status RollBackRow(int64_t row, const SavedRow& saved,
                           const std::vector<int64_t>& kept) override;
  absl::StatusOr<SavedRow> ReadInitialState(const std::string& path) const override;
  // The modules are shared: forward passes keep no state in them, and the
  // weights' packed and int8 copies are looked up under a lock.
  std::unique_ptr<LmBackend> ShareWeights() const override;

  CausalLm& model() { return model_; }
  // The rows, for callers that run the model on them directly (tests,
  // benchmarks).
  LmState& state() { return state_; }
  // The decode step's CUDA graphs, or null where they do not apply
  // (StepGraphs::Unavailable).
  const StepGraphs* graphs() const { return graphs_.get(); }

 private:
  CausalLm model_;
  torch::Device device_;
  LmState state_;
  int64_t rows_ = 0;
  std::unique_ptr<StepGraphs> graphs_;
  // The last PrefillForRollBack's rows, tokens and layer inputs; RollBackRow
  // replays each row's once.
  struct Check {
    std::vector<int64_t> rows;
    std::vector<std::vector<int64_t>> tokens;
    PrefillRecord record;
    std::vector<bool> used;  // per row: rolled back, reset or released since
  };
  // The check's index of `row`, when it may replay the first kept.size()
  // tokens fed to it; -1 otherwise.
  int64_t ReplayableIndex(int64_t row, const std::vector<int64_t>& kept) const;
  void ForgetCheckOf(int64_t row);
  std::optional<Check> check_;
};

}  // namespace attn
