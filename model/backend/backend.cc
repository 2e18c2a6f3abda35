#include "model/backend/backend.h"

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

int64_t SavedRow::bytes() const {
  int64_t bytes = 0;
  for (const auto& t : tensors) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  return bytes;
}

absl::StatusOr<SavedRow> LmBackend::SaveRowOnto(int64_t row, const SavedRow* /*base*/) {
  return SaveRow(row);
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
