// The build without CUDA kernels (ATTN_CUDA_KERNELS off): the op-by-op path
// runs everywhere.
#include "model/cuda/state_kernels.h"

namespace attn::cuda {

bool KernelsEnabled() { return false; }

namespace {
const char kAbsent[] = "this build has no CUDA kernels (configure with -DATTN_CUDA_KERNELS=ON)";
}  // namespace

std::string Mamba2Step(const Mamba2StepArgs&, void*) { return kAbsent; }
std::string CausalConvSilu(const kernels::CausalConvArgs&, void*) { return kAbsent; }
std::string GatedRmsNorm(const GatedRmsNormArgs&, void*) { return kAbsent; }
std::string Rwkv7Step(const Rwkv7StepArgs&, void*) { return kAbsent; }
std::string Rwkv7Scan(const Rwkv7ScanArgs&, void*) { return kAbsent; }
std::string Rwkv7Mix(const kernels::TokenShiftMixArgs&, void*) { return kAbsent; }
std::string Rwkv7Activations(const kernels::Rwkv7ActivationsArgs&, void*) { return kAbsent; }
std::string Rwkv7HeadOutput(const Rwkv7HeadOutputArgs&, void*) { return kAbsent; }
std::string Rwkv4Wkv(const Rwkv4WkvArgs&, void*) { return kAbsent; }
std::string LinearStep(const LinearStepArgs&, void*) { return kAbsent; }
std::string AftDecayStep(const AftDecayStepArgs&, void*) { return kAbsent; }
std::string AftStep(const AftStepArgs&, void*) { return kAbsent; }
std::string AttentionStep(const AttentionStepArgs&, void*) { return kAbsent; }
std::string Experts(const ExpertsArgs&, void*) { return kAbsent; }

}  // namespace attn::cuda
