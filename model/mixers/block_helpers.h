// What the whole blocks (model/mixers/rwkv4.h, rwkv7.h, mamba2.h) share: a
// bias-free projection, and the RWKV token shift (each token mixed with the
// one before it; the last token of a chunk is what the next chunk's first
// token sees); and what the mixers' CUDA steps share.
#pragma once

#include <c10/core/DeviceGuard.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <initializer_list>
#include <string>

#include "model/mixers/mixer.h"

namespace attn {

// x @ W^T of a bias-free linear layer, through Dense (its int8 copy where
// the weight has one).
torch::Tensor Project(const torch::Tensor& x, const torch::nn::Linear& layer);

// The token before each of a [B, T, C]: `shift` [B, C] (the token before
// the chunk), then a's first T - 1 tokens.
torch::Tensor Shifted(const torch::Tensor& a, const torch::Tensor& shift);

// A channel mix over the last tokens of a chunk, whose input b = norm(h)
// [B, T', C]. With `shift` (b of the token before them) all T' tokens are
// current; without it (undefined) the first token only supplies the second
// one's previous value. Sets `shift` to b of the last token.
struct ShiftedTail {
  torch::Tensor previous, current, residual;  // [B, T' or T' - 1, C]
};
ShiftedTail ShiftTail(const torch::Tensor& b, const torch::Tensor& h, torch::Tensor& shift);

// The tokens at the end of a chunk of `time` whose time-mix outputs an RWKV
// block computes when `keep` outputs are wanted: those, and the token
// before them where the chunk has it (each token's channel mix needs the
// one before); with keep 0 the last token alone, whose channel-mix input
// is the shift the state keeps (the channel mix itself is then skipped: a
// prompt's earlier chunks, speculation's rollback).
int64_t OutputTail(int64_t time, int64_t keep);

// Whether a step's CUDA kernel (model/cuda/state_kernels.h) may replace
// the torch operations: the build has the kernels, no gradient is recorded
// (the kernels record none; training keeps the operations), and every one
// of `tensors` is float32 on a GPU. The first two are checked first, so a
// build without the kernels pays nothing more.
bool CudaStepApplies(std::initializer_list<const torch::Tensor*> tensors);

// Whether a step kernel that updates a state pool's rows in place may run
// for input x: CudaStepApplies for x and every state tensor, each
// contiguous, the lengths on a GPU.
bool CudaPoolStepApplies(const torch::Tensor& x, const MixerState& state);

// LibTorch's current CUDA stream on the current GPU, as the cudaStream_t
// the kernels of model/cuda queue on; null in a build without them.
void* CurrentCudaStream();

// Runs `launch(stream)` (a model/cuda kernel on `stream`, which returns its
// launch error) on `device`, the GPU of the tensors it reads, and LibTorch's
// current stream there; throws naming `what` if it failed.
template <typename Launch>
void RunOnGpu(torch::Device device, const char* what, Launch&& launch) {
  // A kernel runs on the calling thread's current GPU.
  const c10::DeviceGuard on_device(device);
  const std::string error = launch(CurrentCudaStream());
  TORCH_CHECK(error.empty(), what, ": the CUDA kernel: ", error);
}

// Runs `launch(stream)` (a model/cuda step on `stream`, which returns its
// launch error) on the state's GPU and LibTorch's current stream there,
// throws naming `what` if it failed, then advances rows `slots` (on the
// device) by one token: the kernels read the lengths, so they change only
// after.
template <typename Launch>
void RunPoolStep(MixerState& state, const torch::Tensor& slots, const char* what, Launch&& launch) {
  RunOnGpu(state.length.device(), what, launch);
  AdvanceRows(state, slots, 1);
}

}  // namespace attn
