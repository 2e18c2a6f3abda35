#include "model/backend/backend.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
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

absl::StatusOr<torch::Tensor> RowsTokens(const std::vector<int64_t>& rows,
                                         const std::vector<std::vector<int64_t>>& tokens,
                                         torch::Device device) {
  if (rows.empty() || tokens.size() != rows.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tokens: ", tokens.size(), " lists for ",
                                                   rows.size(), " rows (at least one)"));
  }
  std::vector<int64_t> flat;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].size() != tokens[0].size()) {
      return absl::InvalidArgumentError(absl::StrCat("tokens: row ", rows[i], " has ",
                                                     tokens[i].size(), " tokens, row ", rows[0],
                                                     " has ", tokens[0].size()));
    }
    flat.insert(flat.end(), tokens[i].begin(), tokens[i].end());
  }
  return torch::tensor(flat, torch::dtype(torch::kLong))
      .view({static_cast<int64_t>(rows.size()), static_cast<int64_t>(tokens[0].size())})
      .to(device);
}

torch::Tensor RowsIds(const std::vector<int64_t>& rows, torch::Device device) {
  return torch::tensor(rows, torch::dtype(torch::kLong)).to(device);
}

int64_t SavedRow::bytes() const {
  int64_t bytes = 0;
  for (const auto& t : tensors) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  return bytes;
}

absl::StatusOr<SavedRow> LmBackend::SaveRowOnto(int64_t row, const SavedRow* /*base*/) {
  return SaveRow(row);
}

absl::StatusOr<SavedRow> LmBackend::ViewOnto(const SavedRow& prefix, const SavedRow& /*source*/,
                                             const SavedRow& /*copy*/) const {
  return prefix;
}

absl::StatusOr<torch::Tensor> LmBackend::PrefillForRollBack(
    const std::vector<int64_t>& rows, const std::vector<std::vector<int64_t>>& tokens) {
  absl::StatusOr<torch::Tensor> fed = RowsTokens(rows, tokens, device());
  if (!fed.ok()) return fed.status();
  return Prefill(*fed, RowsIds(rows, device()), PrefillLogits::kAll);
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

bool MixerStateGrows(const std::string& mixer) {
  return mixer == "mha" || mixer == "mha-alibi" || mixer == "relative" || mixer == "gqa";
}

bool RollsBackCheaply(const LmBackend& backend) {
  const int64_t longest = backend.max_context() > 0 ? backend.max_context() : int64_t{1} << 21;
  return backend.rollback_bytes_per_sequence(longest) ==
         backend.rollback_bytes_per_sequence(longest / 2);
}

std::string BackendKindName(BackendKind kind) { return EnumName(kBackendNames, kind); }

bool ParseBackendKind(const std::string& name, BackendKind* kind) {
  return ParseEnumName(kBackendNames, name, kind);
}

}  // namespace attn
