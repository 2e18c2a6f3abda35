// A mixer that is a whole layer: it maps the residual stream h to the next
// one with its own norms, residuals and channel mixing (RWKV-7, RWKV-4,
// Mamba-2), where a plain mixer maps Norm(h) to what a layer adds to h. A
// language model wraps it in a WholeBlock (model/lm/block.h), a plain mixer
// in a MixerBlock.
//
// Every whole block shares one skeleton, written here once: a chunk
// continues rows `slots` of a state by gathering their tensors, running the
// block's equations over them (Run), scattering them back and advancing the
// rows' lengths; a step is a chunk of one token; forward runs from empty
// rows. A tensor the fused CPU kernel or a GPU step kernel updates in place
// (a matrix per head, too large to copy out and back) is passed whole with
// the rows' ids instead (InPlaceWhenFused). A new kind of whole block is its parameters,
// its state's tensors and Run: one file of equations.
//
// The layers of a stack may hand each other values besides h (RWKV-7's
// value residual: layer 0's values, which every later layer mixes into its
// own): a LayerCarry, which the *WithCarry forms take. A block used alone
// is its own first layer.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "model/mixers/mixer.h"

namespace attn {

// What a layer hands to the layers above it besides the hidden state.
// Shaped as the call's x: [B, T, d] for forward and prefill, [B, d] for
// step. Blocks of kinds that use none neither read nor write it.
struct LayerCarry {
  torch::Tensor first_values;  // RWKV-7: layer 0's values
  // Set by a caller that may roll the chunk back (speculation's check):
  // where the layer being run keeps, per position, the inputs of its state
  // update, for SequenceMixer::ReplayUpdates. A kind that keeps none, or a
  // chunk whose outputs are not all wanted, leaves it empty.
  std::vector<torch::Tensor>* updates = nullptr;
};

// How a call reaches the state's tensors that InPlaceWhenFused names (every
// other tensor's rows are gathered and scattered back).
enum class RowAccess {
  kGathered,  // gathered too: the operations' path
  kFusedCpu,  // in place, by the rows' host ids: the CPU's fused kernels
  kGpuStep,   // in place, by the rows' ids on the GPU: a one-token step's kernel
};

// Where a block's elementwise work runs: torch operations, the CPU's fused
// kernels (model/kernels/kernels.h) or the GPU's (model/cuda/state_kernels.h).
enum class Elementwise { kOps, kCpu, kGpu };

// The rows of a state one call continues, in the state's tensor order.
struct BlockRows {
  // Each tensor's rows [B, ...], gathered; or, where a kernel updates it in
  // place, the pool's whole tensor.
  std::vector<torch::Tensor> tensors;
  // With a pool's whole tensor: the rows' ids (B of them); null: rows
  // 0..B-1.
  const int64_t* ids = nullptr;
  // With RowAccess::kGpuStep: the same ids on the state's device.
  torch::Tensor device_ids;
  RowAccess access = RowAccess::kGathered;
  bool fused() const { return access == RowAccess::kFusedCpu; }    // Run takes the fused CPU path
  bool gpu_step() const { return access == RowAccess::kGpuStep; }  // Run steps with the GPU kernel
};

class WholeBlockMixer : public SequenceMixer {
 public:
  using SequenceMixer::SequenceMixer;

  torch::Tensor forward(const torch::Tensor& x) final;
  torch::Tensor step(const torch::Tensor& x, MixerState& state,
                     const torch::Tensor& slots = {}) final;

  // The three forms inside a stack: `carry` holds what the layers below
  // left and takes what this one leaves.
  torch::Tensor ForwardWithCarry(const torch::Tensor& x, LayerCarry& carry);
  // prefill_last() with a carry: x [B, C, d], the last `keep` outputs.
  torch::Tensor PrefillWithCarry(const torch::Tensor& x, MixerState& state,
                                 const torch::Tensor& slots, int64_t keep, LayerCarry& carry);
  torch::Tensor StepWithCarry(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots,
                              LayerCarry& carry);

 protected:
  // The block's equations over x [B, T, d] continuing `rows`, which it
  // updates (assigning a gathered tensor anew is fine); the last `keep`
  // tokens' outputs [B, keep, d].
  virtual torch::Tensor Run(const torch::Tensor& x, BlockRows& rows, int64_t keep,
                            LayerCarry& carry) = 0;
  // Whether a fused Run, or a GPU step, updates the state's tensor `tensor`
  // in place in the pool (by BlockRows::ids) rather than in gathered rows.
  // Default: none. Asked on every step: it must not allocate.
  virtual bool InPlaceWhenFused(size_t /*tensor*/) const { return false; }
  // Whether a one-token step of x [B, 1, d] on `state` runs this kind's GPU
  // step kernel on the pool's rows in place (RowAccess::kGpuStep): Run must
  // then take that kernel. Default: never.
  virtual bool StepsPoolRowsOnGpu(const torch::Tensor& /*x*/, const MixerState& /*state*/) const {
    return false;
  }
  // The skeleton around Run, for the other calls that continue rows (a
  // kind's ReplayUpdates): rows `slots` (`batch` of them) reached as
  // `access` says, `run` on them, the gathered tensors written back and the
  // rows advanced by `tokens`.
  void ContinueRows(MixerState& state, const torch::Tensor& slots, int64_t batch, int64_t tokens,
                    RowAccess access, const std::function<void(BlockRows&)>& run) const;

 private:
  torch::Tensor Prefill(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots,
                        int64_t keep) final;
  // Prefill without the argument checks.
  torch::Tensor Continue(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots,
                         int64_t keep, LayerCarry& carry);
};

}  // namespace attn
