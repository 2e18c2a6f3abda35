// A build without CUDA graphs: Unavailable() says so, and the capturer
// fails saying so.
#include <torch/torch.h>

#include "model/backend/step_graphs.h"

namespace attn {

bool step_graphs_internal::GraphsBuilt() { return false; }

StepCapturer CudaGraphCapturer(torch::Device /*device*/) {
  return [](const std::function<torch::Tensor()>& /*step*/, CapturedStep* /*share*/,
            std::string* error) -> std::unique_ptr<CapturedStep> {
    *error = "this build has no CUDA graphs (a GPU build: -DATTN_CUDA_KERNELS=ON)";
    return nullptr;
  };
}

}  // namespace attn
