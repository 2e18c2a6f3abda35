#include "model/backend/backend.h"

#include <torch/torch.h>

#include "model/backend/backend_kind.h"
#include "util/enum_names.h"

namespace attn {
namespace {

constexpr std::pair<BackendKind, const char*> kBackendNames[] = {
    {BackendKind::kAuto, "auto"},
    {BackendKind::kNative, "native"},
    {BackendKind::kTorchScript, "torchscript"},
};

}  // namespace

torch::Tensor RowTokens(const std::vector<int64_t>& tokens, torch::Device device) {
  return torch::tensor(tokens, torch::dtype(torch::kLong))
      .view({1, static_cast<int64_t>(tokens.size())})
      .to(device);
}

torch::Tensor RowIds(int64_t row, torch::Device device) {
  return torch::tensor(std::vector<int64_t>{row}, torch::dtype(torch::kLong)).to(device);
}

int64_t SavedRow::bytes() const {
  int64_t bytes = 0;
  for (const auto& t : tensors) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  return bytes;
}

absl::StatusOr<SavedRow> LmBackend::SaveRowOnto(int64_t row, const SavedRow* /*base*/) {
  return SaveRow(row);
}

absl::StatusOr<torch::Tensor> LmBackend::PrefillForRollBack(int64_t row,
                                                            const std::vector<int64_t>& tokens) {
  return Prefill(RowTokens(tokens, device()), RowIds(row, device()), PrefillLogits::kAll);
}

absl::Status LmBackend::RollBackRow(int64_t row, const SavedRow& saved,
                                    const std::vector<int64_t>& kept) {
  if (absl::Status loaded = LoadRow(row, saved); !loaded.ok()) return loaded;
  if (kept.empty()) return absl::OkStatus();
  return Prefill(RowTokens(kept, device()), RowIds(row, device()), PrefillLogits::kNone).status();
}

absl::StatusOr<SavedRow> LmBackend::ReadInitialState(const std::string& /*path*/) const {
  return absl::FailedPreconditionError(
      "only rwkv7 models on the native backend take initial states");
}

std::unique_ptr<LmBackend> LmBackend::ShareWeights() const { return nullptr; }

std::string BackendKindName(BackendKind kind) { return EnumName(kBackendNames, kind); }

bool ParseBackendKind(const std::string& name, BackendKind* kind) {
  return ParseEnumName(kBackendNames, name, kind);
}

}  // namespace attn
