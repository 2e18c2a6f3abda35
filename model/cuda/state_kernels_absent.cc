// The build without CUDA kernels (ATTN_CUDA_KERNELS off): the op-by-op path
// runs everywhere.
#include "model/cuda/state_kernels.h"

namespace attn::cuda {

bool KernelsEnabled() { return false; }

namespace {
const char kAbsent[] = "this build has no CUDA kernels (configure with -DATTN_CUDA_KERNELS=ON)";
}  // namespace

std::string Mamba2Step(const Mamba2StepArgs&) { return kAbsent; }
std::string Rwkv7Step(const Rwkv7StepArgs&) { return kAbsent; }
std::string Rwkv7Scan(const Rwkv7ScanArgs&) { return kAbsent; }
std::string Rwkv4Wkv(const Rwkv4WkvArgs&) { return kAbsent; }
std::string LinearStep(const LinearStepArgs&) { return kAbsent; }
std::string AftDecayStep(const AftDecayStepArgs&) { return kAbsent; }
std::string AftStep(const AftStepArgs&) { return kAbsent; }

}  // namespace attn::cuda
