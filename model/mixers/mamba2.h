// A Mamba-2 block (Dao and Gu 2024, "Transformers are SSMs"): a selective
// state-space recurrence whose state decays by one data-dependent scalar per
// head, which makes it linear attention with a per-head decay. The block is
// whole (a WholeBlockMixer, model/mixers/whole_block.h): it maps the
// residual stream h to the next one, its RMSNorm and residual included.
//
// With D = d_model, I = expand * D inner channels in H heads of P = I / H,
// a state width N, G groups of heads sharing B and C, and W the
// convolution's width, per token t:
//
//   u_t = rmsnorm(h_t)
//   [z_t, xbc_t, dt_t] = W_in u_t            z [I], xbc [I + 2 G N], dt [H]
//   xbc'_t = silu(conv_b + sum_{j<W} conv_w[:, j] * xbc_{t-W+1+j})
//            (causal depthwise; inputs before the sequence are zero)
//   [x_t, B_t, C_t] = xbc'_t                 x [H, P], B and C [G, N]
//   dt_t = softplus(dt_t + dt_bias),  A = -exp(A_log)           per head
//   per head h, of group g = h / (H / G):
//     S_t = exp(dt_t A) S_{t-1} + dt_t x_t B_t^T          S [P, N]
//     y_t = S_t C_t + D_h x_t
//   y = groupnorm_rms(y * silu(z)) * norm_w    (RMS over each group's I / G)
//
// Both norms take options.norm_eps (1e-5 in the released models).
//   out_t = h_t + W_out y
//
// Recurrent state per sequence, constant in context:
//   tensors[0] conv [W - 1, I + 2 G N]   the last W - 1 inputs xbc, oldest first
//   tensors[1] ssm [H, P, N]             S
//
// forward, prefill and step compute the same recurrence: the projections
// and the convolution of all tokens at once, then the state's update.
// A chunk of several tokens takes the chunked form of the paper's section 6
// (SSD), in blocks of Q tokens with a_t = dt_t A:
//
//   seg[i][j] = a_{j+1} + ... + a_i            (j <= i, inside a block)
//   y_i = sum_{j<=i} e^{seg[i][j]} (C_i . B_j) dt_j x_j     (matrix products)
//       + e^{a_0 + ... + a_i} S C_i                      (S entering the block)
//   S <- e^{a_0 + ... + a_{Q-1}} S + sum_j e^{seg[Q-1][j]} dt_j x_j B_j^T
//
// which is the recurrence regrouped (tests/rwkv4_mamba2_test.cc proves it
// in float64 past 8,192 tokens); a step stays the recurrence. seg must not
// be a difference of float prefix sums, which would cancel: op by op it is
// summed over each segment, the fused kernel subtracts prefix sums kept in
// double.
// On the CPU the update is one fused kernel (Mamba2Scan in
// model/kernels/kernels.h), chunked in blocks of 64 from 16 tokens on and
// token by token below, which reads x, B, C and the raw dt where the
// convolution and the input projection wrote them; the convolution
// (CausalConvSilu) and the gated norm (GatedRmsNormRows) are one kernel
// each, where op by op a layer takes some thirty LibTorch ops at one token.
// Token by token, each token reads and rewrites all of S; chunked, S stays
// in registers across a block (mamba2-130m's 512-token prefill 1.08-1.18x
// faster on a Zen 1; docs/benchmarks-log.md, "Mamba-2's scan in blocks on
// the CPU"). Elsewhere, or with fused_kernels off (the path a GPU runs, and
// training), the chunked form runs op by op in blocks of options.chunk. On
// a GPU a step's update is one CUDA kernel where the build has them
// (model/cuda/state_kernels.h, -DATTN_CUDA_KERNELS=ON), float32 only; its
// convolution and norm stay torch operations.
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "model/cuda/state_kernels.h"
#include "model/kernels/kernels.h"
#include "model/layers/norms.h"
#include "model/mixers/whole_block.h"

namespace attn {

class Mamba2Impl : public WholeBlockMixer {
 public:
  // options.kind must be kMamba2; options.mamba2 and heads size the block:
  // heads must divide expand * d_model, and groups divide heads.
  explicit Mamba2Impl(const MixerOptions& options);

  MixerState initial_state(int64_t rows, torch::Device device) const override;
  int64_t max_context() const override { return -1; }
  int64_t state_bytes_per_sequence(int64_t context) const override;

  int64_t inner() const { return options_.mamba2.expand * options_.d_model; }
  int64_t head_dim() const { return inner() / options_.heads; }
  // Channels of xbc: x, B and C.
  int64_t conv_channels() const;

  // Given LayerCarry::updates, a chunk keeps its input projection, the
  // whole input of the convolution and the scan; a prefix of it then
  // replays as those two alone over the prefix: no product runs.
  bool ReplayUpdates(const std::vector<torch::Tensor>& updates, MixerState& state,
                     const torch::Tensor& slots, int64_t count) const override;

 protected:
  // The block over x [B, T, C] continuing `rows` (the convolution's window,
  // the scan's matrices), which it updates; the last `keep` tokens'
  // outputs. No carry.
  torch::Tensor Run(const torch::Tensor& x, BlockRows& rows, int64_t keep,
                    LayerCarry& carry) override;
  // The scan's matrices (a fused run or a GPU step updates the pool's rows
  // in place).
  bool InPlaceWhenFused(size_t tensor) const override;
  // Where ScanStepOnGpu's conditions hold for x, the parameters it reads
  // and every state tensor (each contiguous).
  bool StepsPoolRowsOnGpu(const torch::Tensor& x, const MixerState& state) const override;

 private:
  struct Scan;  // the per-token inputs of the state update

  // xbc after the convolution and silu, continuing `window` (the last W - 1
  // inputs [B, W - 1, channels]), which it advances.
  torch::Tensor Convolve(const torch::Tensor& xbc, torch::Tensor& window) const;
  // y [B, keep, I] of the last `keep` tokens by torch operations, updating
  // ssm [B, H, P, N].
  torch::Tensor ScanByOps(const Scan& scan, torch::Tensor& ssm, int64_t keep) const;
  // One token on a GPU as one CUDA kernel (model/cuda/state_kernels.h),
  // replacing ssm, where the build has the kernels, every tensor is float32
  // on the GPU and no gradient is recorded; else an undefined tensor.
  torch::Tensor ScanStepOnGpu(const Scan& scan, torch::Tensor& ssm) const;
  // The same kernel on the pool's matrices in place, rows.device_ids
  // (RowAccess::kGpuStep, where StepsPoolRowsOnGpu held), reading x, B and
  // C from the convolution's output xbc [B, 1, channels] and dt raw from
  // the projection, in place: y [B, 1, I].
  torch::Tensor StepPoolRowsOnGpu(const torch::Tensor& xbc, const torch::Tensor& projected,
                                  BlockRows& rows) const;
  // Queues cuda::Mamba2Step, `args` holding its inputs, for `batch` rows
  // from s_in to s_out (the same tensor: in place), on rows `slots` of them
  // where defined (int64 on the device): y [B, 1, I].
  torch::Tensor LaunchStep(cuda::Mamba2StepArgs args, int64_t batch, const torch::Tensor& s_in,
                           const torch::Tensor& s_out, const torch::Tensor& slots) const;
  // The same by the chunked form (SSD), replacing ssm.
  torch::Tensor ScanChunked(const Scan& scan, torch::Tensor& ssm, int64_t keep) const;
  // The convolution and the scan in the CPU kernels, from the input
  // projection [B, T, I + channels + H] read in place: y [B, keep, I].
  torch::Tensor ScanFused(const torch::Tensor& projected, BlockRows& rows, int64_t keep) const;
  // Where the convolution and the gated norm run (the GPU's kernels:
  // CausalConvSilu, GatedRmsNorm): kCpu for a fused run, kGpu where
  // CudaStepApplies to the projection, the window and the parameters they
  // read, else kOps.
  Elementwise ElementwiseFor(const torch::Tensor& projected, const BlockRows& rows) const;
  // The convolution's arguments: the projection's xbc channels continuing
  // `window` into xbc [B, T, channels], the new window into window_out.
  kernels::CausalConvArgs ConvArgs(const torch::Tensor& projected, const torch::Tensor& window,
                                   torch::Tensor& xbc, torch::Tensor& window_out) const;
  // Convolve by the GPU's kernel, from the projection read in place.
  torch::Tensor ConvolveOnGpu(const torch::Tensor& projected, torch::Tensor& window) const;
  // The gate z (the projection's first I channels) on y [B, keep, I], then
  // an RMS norm over each group's channels, times out_norm_weight.
  torch::Tensor GatedNorm(const torch::Tensor& y, const torch::Tensor& projected,
                          Elementwise how) const;
  // The convolution and the scan from the input projection [B, T, I +
  // channels + H], continuing `rows`: y [B, keep, I] (ScanFused, or the
  // convolution as `how` says and the scan's kernel or operations).
  torch::Tensor ConvolveAndScan(const torch::Tensor& projected, BlockRows& rows, int64_t keep,
                                Elementwise how) const;

  torch::Tensor conv_weight_, conv_bias_;  // [channels, 1, W], [channels]
  torch::Tensor dt_bias_, a_log_, skip_;   // [H] each; skip is D
  torch::Tensor out_norm_weight_;          // [I]
  torch::nn::Linear in_proj_{nullptr}, out_proj_{nullptr};
  Norm norm_{nullptr};
};
TORCH_MODULE(Mamba2);

}  // namespace attn
