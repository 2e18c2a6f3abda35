#include "model/mixers/block_helpers.h"

#include <torch/torch.h>

#include <algorithm>

#include "model/cuda/state_kernels.h"
#include "model/layers/dense.h"

namespace attn {

torch::Tensor Project(const torch::Tensor& x, const torch::nn::Linear& layer) {
  return Dense(x, layer->weight);
}

torch::Tensor Shifted(const torch::Tensor& a, const torch::Tensor& shift) {
  const int64_t time = a.size(1);
  if (time == 1) return shift.unsqueeze(1);
  return torch::cat({shift.unsqueeze(1), a.narrow(1, 0, time - 1)}, 1);
}

ShiftedTail ShiftTail(const torch::Tensor& b, const torch::Tensor& h, torch::Tensor& shift) {
  const int64_t time = b.size(1);
  ShiftedTail tail;
  if (shift.defined()) {
    tail.previous = Shifted(b, shift);
    tail.current = b;
    tail.residual = h;
  } else {
    tail.previous = b.narrow(1, 0, time - 1);
    tail.current = b.narrow(1, 1, time - 1);
    tail.residual = h.narrow(1, 1, time - 1);
  }
  shift = b.select(1, time - 1);
  return tail;
}

int64_t OutputTail(int64_t time, int64_t keep) { return keep == 0 ? 1 : std::min(time, keep + 1); }

bool CudaStepApplies(std::initializer_list<const torch::Tensor*> tensors) {
  if (!cuda::KernelsEnabled() || torch::GradMode::is_enabled()) return false;
  return std::all_of(tensors.begin(), tensors.end(), [](const torch::Tensor* t) {
    return t->is_cuda() && t->scalar_type() == torch::kFloat;
  });
}

bool CudaPoolStepApplies(const torch::Tensor& x, const MixerState& state) {
  if (!CudaStepApplies({&x}) || !state.length.is_cuda() || !state.length.is_contiguous()) {
    return false;
  }
  return std::all_of(state.tensors.begin(), state.tensors.end(), [](const torch::Tensor& t) {
    return t.is_cuda() && t.scalar_type() == torch::kFloat && t.is_contiguous();
  });
}

}  // namespace attn
