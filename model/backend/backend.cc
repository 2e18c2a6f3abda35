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

std::string BackendKindName(BackendKind kind) { return EnumName(kBackendNames, kind); }

bool ParseBackendKind(const std::string& name, BackendKind* kind) {
  return ParseEnumName(kBackendNames, name, kind);
}

}  // namespace attn
