// A mixture of experts on a GPU without the host (model/layers/
// mixture_of_experts.h; cuda::Experts, model/cuda/state_kernels.h).
//
// MixtureOfExperts::forward groups its rows by expert on the host, which
// reads the router's choices from the device: a wait in every layer of a
// step, and a step that waits cannot be captured in a CUDA graph. For the
// few rows of a decode step the choices stay on the device instead: the
// router's top k and gates are LibTorch operations, a kernel runs each
// chosen expert on its rows (reading only the chosen experts' weights),
// and the gates weigh the results.
#pragma once

#include <torch/types.h>

#include "model/layers/mixture_of_experts.h"

namespace attn {

// Whether RunExperts takes the kernel for `rows` rows: the kernels run
// (CudaStepApplies), x is float32 on a GPU, rows * top_k is at most
// cuda::kMaxExpertChoices, and the weights suit the kernel
// (KernelWeightTable, on x's GPU). Shapes and devices alone decide it, so a CUDA
// graph's capture takes the path its bucket's first, eager step took.
bool ExpertsKernelApplies(MixtureOfExpertsImpl& moe, const torch::Tensor& x);

// moe.forward(x), through the kernel where ExpertsKernelApplies.
torch::Tensor RunExperts(MixtureOfExpertsImpl& moe, const torch::Tensor& x);

}  // namespace attn
