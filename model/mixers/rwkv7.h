// An RWKV-7 block ("Goose", Peng et al. 2025): time mixing is linear
// attention whose state is a matrix per head, updated by a generalised delta
// rule with a data-dependent per-channel decay and an in-context learning
// rate; channel mixing is a squared-ReLU feed-forward. Both see the previous
// token through a learned token shift. The block is whole (a
// WholeBlockMixer, model/mixers/whole_block.h): it maps the residual stream
// h to the next one, norms and residuals included.
//
// Per token t, with x_t the block's input (layer 0 first normalises it: x_t =
// ln0(x_t)), C channels in H heads of N = C / H:
//
//   a_t  = ln1(x_t),  d_t = a_{t-1} - a_t   (a_{-1}: the state's shift)
//   x^c  = a_t + d_t * mu_c                  for c in r, w, k, v, i, g
//   r = W_r x^r,  k = W_k x^k,  v = W_v x^v
//   w = exp(-e^{-1/2} sigmoid(w_0 + W_w2 tanh(W_w1 x^w)))   in (0.545, 1)
//   v = v + (v_first - v) * sigmoid(v_0 + W_v2 W_v1 x^v)     layers > 0
//   i = sigmoid(i_0 + W_i2 W_i1 x^i)                         in-context rate
//   g = W_g2 sigmoid(W_g1 x^g)
//   kk = normalise_per_head(k * kappa),  k = k * (1 + (i - 1) * alpha)
//   per head, S [N, N] (rows: value channels, columns: key channels):
//     S_t = S_{t-1} (diag(w) - kk^T (i * kk)) + v^T k
//     o_t = S_t r
//   o = groupnorm_per_head(o; eps) * gamma + beta + (sum_head(r * k * rho)) v
//   h_t = x_t + W_o (o * g)
//   b_t = ln2(h_t),  e_t = b_{t-1} - b_t
//   out_t = h_t + W_2 relu(W_1 (b_t + e_t * mu_f))^2
//
// v_first is the first layer's v (the value residual), which a model hands
// up its layers in a LayerCarry; a block used alone, or without one, is its
// own first layer. The decay is written as in the released models,
// exp(-exp(-softplus(-z) - 0.5)), which equals the form above.
//
// Recurrent state per sequence, constant in context ((2 C + H N^2) floats):
//   tensors[0] att_shift [C]      a_{t} of the last token (time mixing)
//   tensors[1] wkv [H, N, N]      S
//   tensors[2] ffn_shift [C]      b_{t} of the last token (channel mixing)
//
// forward, prefill and step compute the same recurrence: the projections of
// all tokens at once, then the state's update token by token, which costs
// O(C N) per token against the projections' O(C^2). On the CPU the update is
// one fused loop (model/kernels/rwkv7_kernel.cc, declared in model/kernels/kernels.h), and so
// are the six token-shift mixes and the activations between the projections and the
// update (w, the value residual, iclr, kk and k); elsewhere, or with fused_kernels off,
// they are torch operations, the update token by token. On a GPU, where the
// build has the CUDA kernels (model/cuda/state_kernels.h), the mixes, the
// activations, a step's or a chunk's update and each head's output norm
// are one kernel each.
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <array>

#include "model/layers/norms.h"
#include "model/mixers/whole_block.h"

namespace attn {

class Rwkv7Impl : public WholeBlockMixer {
 public:
  // options.kind must be kRwkv7; heads divide d_model; options.layer,
  // ff_hidden, rwkv7_ranks and group_norm_eps size the block. Parameters
  // start from the RWKV-7 reference trainer's initialisation scheme.
  explicit Rwkv7Impl(const MixerOptions& options);

  MixerState initial_state(int64_t rows, torch::Device device) const override;
  int64_t max_context() const override { return -1; }
  int64_t state_bytes_per_sequence(int64_t context) const override;

  int64_t head_size() const { return options_.d_model / options_.heads; }

  // A chunk whose outputs are all wanted keeps, given LayerCarry::updates,
  // what its state update read at each position (a = ln1(x), w, k, v, kk,
  // the in-context rate, b = ln2(h)); a prefix of it then replays as the
  // update alone over the prefix, and the shifts a and b of its last
  // position: no projection runs.
  bool ReplayUpdates(const std::vector<torch::Tensor>& updates, MixerState& state,
                     const torch::Tensor& slots, int64_t count) const override;

 protected:
  // The block over x [B, T, C] continuing `rows` (the token shifts and the
  // matrices, in the state's order), which it updates; the last `keep`
  // tokens' outputs.
  torch::Tensor Run(const torch::Tensor& x, BlockRows& rows, int64_t keep,
                    LayerCarry& carry) override;
  // The matrices (a fused run or a GPU step updates the pool's rows in
  // place).
  bool InPlaceWhenFused(size_t tensor) const override;
  // Where StepOnGpu's conditions hold for x and every state tensor (each
  // contiguous).
  bool StepsPoolRowsOnGpu(const torch::Tensor& x, const MixerState& state) const override;

 private:
  struct Mixed;  // the time mix's per-token vectors

  // Where the elementwise work runs (the GPU's kernels: Rwkv7Mix,
  // Rwkv7Activations, Rwkv7HeadOutput): kCpu for a fused run (`fused`),
  // kGpu where CudaStepApplies to a = ln1(x) and the shift, else kOps.
  static Elementwise ElementwiseFor(const torch::Tensor& a, const torch::Tensor& shift, bool fused);

  // The time mix's inputs to the state update, for a [B, T, C] a = ln1(x).
  // r and g only for the last `tail` tokens.
  Mixed TimeMixInputs(const torch::Tensor& a, const torch::Tensor& shift, LayerCarry& carry,
                      int64_t tail, Elementwise how);
  // The six mixes x^r, x^w, x^k, x^v, x^i, x^g of a, each [B, T, C].
  std::array<torch::Tensor, 6> Mixes(const torch::Tensor& a, const torch::Tensor& shift,
                                     Elementwise how) const;
  // Turns m's projections (w: W_w2 tanh(W_w1 x^w), iclr: W_i2 W_i1 x^i, v
  // and k) into the update's inputs, and sets m.kk. `gate` (W_v2 W_v1 x^v)
  // and `first` (the first layer's v) mix the value residual, or are
  // undefined.
  void Activate(Mixed& m, const torch::Tensor& gate, const torch::Tensor& first,
                Elementwise how) const;
  // The per-head update over T tokens in torch operations; o [B, tail, C]
  // (undefined with tail 0).
  // One token on a GPU as one CUDA kernel (model/cuda/state_kernels.h),
  // replacing wkv: o [B, 1, C], where the build has the kernels, every
  // tensor is float32 on the GPU and no gradient is recorded; else an
  // undefined tensor.
  torch::Tensor StepOnGpu(const Mixed& m, torch::Tensor& wkv) const;
  // The same kernel on the pool's matrices in place, rows.device_ids
  // (RowAccess::kGpuStep, where StepsPoolRowsOnGpu held): o [B, 1, C].
  torch::Tensor StepPoolRowsOnGpu(const Mixed& m, BlockRows& rows) const;
  // Queues cuda::Rwkv7Step from s_in to s_out (the same tensor: in place),
  // on rows `slots` of them where defined (int64 on the device): o [B, 1, C].
  torch::Tensor LaunchStep(const Mixed& m, const torch::Tensor& s_in, const torch::Tensor& s_out,
                           const torch::Tensor& slots) const;
  // Every token of a chunk on a GPU as one CUDA kernel (cuda::Rwkv7Scan),
  // replacing wkv and setting *o to [B, tail, C] (left undefined with tail
  // 0), where StepOnGpu's conditions hold; else false, with nothing done.
  bool ScanOnGpu(const Mixed& m, torch::Tensor& wkv, torch::Tensor* o) const;
  torch::Tensor UpdateByOps(const Mixed& m, torch::Tensor& wkv) const;
  // The block's output before its gate, [B, tail, C], from the update's
  // o: each head normalised, plus the current token's bonus. In torch
  // operations; the fused kernel computes the same (UpdateFused).
  torch::Tensor OutputByOps(const torch::Tensor& o, const Mixed& m) const;
  // The same in one CUDA kernel (cuda::Rwkv7HeadOutput).
  torch::Tensor OutputOnGpu(const torch::Tensor& o, const Mixed& m) const;
  // The update and that output in one kernel over the rows' states.
  torch::Tensor UpdateFused(const Mixed& m, BlockRows& rows, int64_t time) const;
  // The channel mix of the last tokens h [B, T', C] of a chunk: with
  // `shift` (b before them, [B, C]) all T' tokens, without it (undefined)
  // the last T' - 1, each after the one before. Returns h + mix for them
  // and sets `shift` to b of the last token; `normed`, when given, to b of
  // every token.
  torch::Tensor ChannelMix(const torch::Tensor& h, torch::Tensor& shift,
                           torch::Tensor* normed = nullptr);

  torch::Tensor mix_r_, mix_w_, mix_k_, mix_v_, mix_i_, mix_g_;  // mu [C]
  torch::Tensor decay_bias_, iclr_bias_, value_bias_;            // w_0, i_0, v_0 [C]
  torch::Tensor key_norm_scale_, key_iclr_scale_;                // kappa, alpha [C]
  torch::Tensor bonus_;                                          // rho [H, N]
  torch::Tensor out_norm_gain_, out_norm_bias_;                  // gamma, beta [C]
  torch::Tensor ffn_mix_;                                        // mu_f [C]
  torch::nn::Linear receptance_{nullptr}, key_{nullptr}, value_{nullptr}, output_{nullptr};
  torch::nn::Linear decay_down_{nullptr}, decay_up_{nullptr};  // W_w1 [Dw, C], W_w2 [C, Dw]
  torch::nn::Linear iclr_down_{nullptr}, iclr_up_{nullptr};
  torch::nn::Linear value_down_{nullptr}, value_up_{nullptr};  // layers > 0
  torch::nn::Linear gate_down_{nullptr}, gate_up_{nullptr};
  torch::nn::Linear ffn_key_{nullptr}, ffn_value_{nullptr};  // W_1 [F, C], W_2 [C, F]
  Norm ln0_{nullptr}, ln1_{nullptr}, ln2_{nullptr};          // ln0: layer 0 only
};
TORCH_MODULE(Rwkv7);

}  // namespace attn
