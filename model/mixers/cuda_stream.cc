// CurrentCudaStream in a GPU build: LibTorch's current stream, which a CUDA
// graph's capture sets (model/backend/step_graphs.h).
#include <c10/cuda/CUDAStream.h>

#include "model/mixers/block_helpers.h"

namespace attn {

void* CurrentCudaStream() { return c10::cuda::getCurrentCUDAStream().stream(); }

}  // namespace attn
