// Which backend runs a model (model/backend/backend.h); light enough for
// headers that must not pull in LibTorch.
#pragma once

#include <string>

namespace attn {

enum class BackendKind {
  kAuto,         // native where the package is one of this library's kinds
  kNative,       // CausalLm with the fused kernels
  kTorchScript,  // the package's TorchScript methods
};

std::string BackendKindName(BackendKind kind);  // "auto", "native", "torchscript"
bool ParseBackendKind(const std::string& name, BackendKind* kind);

}  // namespace attn
