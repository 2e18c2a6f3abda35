// An RWKV-4 block (Peng et al. 2023, "RWKV: Reinventing RNNs for the
// Transformer Era"): time mixing is AFT with a per-channel exponential decay
// of the past and a separate bonus for the current token; channel mixing is
// a squared-ReLU feed-forward gated by a receptance. Both see the previous
// token through a token shift. The block is whole (a WholeBlockMixer,
// model/mixers/whole_block.h): it maps the residual stream h to the next
// one, norms and residuals included.
//
// Per token t, with x_t the block's input (layer 0 first normalises it:
// x_t = ln0(x_t)), C channels:
//
//   a_t = ln1(x_t),  a^c = a_{t-1} + (a_t - a_{t-1}) * mu_c    c in k, v, r
//   k = W_k a^k,  v = W_v a^v,  r = sigmoid(W_r a^r)
//   per channel, with w = -exp(time_decay) and u = time_first:
//     wkv_t = (sum_{i<t} e^{(t-1-i) w + k_i} v_i + e^{u + k_t} v_t)
//           / (sum_{i<t} e^{(t-1-i) w + k_i}     + e^{u + k_t})
//   h_t = x_t + W_o (r * wkv_t)
//   b_t = ln2(h_t),  b^c = b_{t-1} + (b_t - b_{t-1}) * mu'_c   c in k, r
//   out_t = h_t + sigmoid(W_r' b^r) * W_v' relu(W_k' b^k)^2
//   and out_t / 2 when rescale_every R > 0 and (layer + 1) % R == 0.
//
// The sums are kept as a numerator a, a denominator b and their common
// exponent p, so that no exponential overflows (the paper's stable form):
//   output:  q = max(p, u + k_t);  wkv_t = (e^{p-q} a + e^{u+k_t-q} v_t)
//                                        / (e^{p-q} b + e^{u+k_t-q})
//   update:  q = max(p + w, k_t);  a = e^{p+w-q} a + e^{k_t-q} v_t;
//            b = e^{p+w-q} b + e^{k_t-q};  p = q
// An empty sequence has a = b = 0 and p = -1e38.
//
// Recurrent state per sequence, constant in context (5 C floats):
//   tensors[0] att_shift [C]   a_t of the last token
//   tensors[1] num [C]         a
//   tensors[2] den [C]         b
//   tensors[3] max [C]         p
//   tensors[4] ffn_shift [C]   b_t of the last token
//
// forward, prefill and step compute the same recurrence: the projections of
// all tokens at once, then the sums token by token (O(C) per token). On the
// CPU that loop is fused (model/kernels/kernels.h, Rwkv4Wkv), on a GPU it is
// one CUDA kernel (model/cuda/state_kernels.h) where the build has them;
// elsewhere, or with fused_kernels off, it is torch operations token by
// token.
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "model/layers/norms.h"
#include "model/mixers/whole_block.h"

namespace attn {

class Rwkv4Impl : public WholeBlockMixer {
 public:
  // options.kind must be kRwkv4; options.layer, ff_hidden and
  // rescale_every shape the block.
  explicit Rwkv4Impl(const MixerOptions& options);

  MixerState initial_state(int64_t rows, torch::Device device) const override;
  int64_t max_context() const override { return -1; }
  int64_t state_bytes_per_sequence(int64_t context) const override;

 protected:
  // The block over x [B, T, C] continuing `rows` (a state's rows, gathered:
  // [B, C] each), which it updates; the last `keep` tokens' outputs. No
  // carry.
  torch::Tensor Run(const torch::Tensor& x, BlockRows& rows, int64_t keep,
                    LayerCarry& carry) override;

 private:
  // wkv of the last `tail` tokens [B, tail, C] by torch operations, updating
  // num, den and max.
  torch::Tensor WkvByOps(const torch::Tensor& k, const torch::Tensor& v, torch::Tensor& num,
                         torch::Tensor& den, torch::Tensor& max, int64_t tail) const;
  // The same as one CUDA kernel (cuda::Rwkv4Wkv), replacing num, den and
  // max, where the build has the kernels, every tensor is float32 on the GPU
  // and no gradient is recorded; else undefined, with nothing done.
  torch::Tensor WkvOnGpu(const torch::Tensor& k, const torch::Tensor& v, torch::Tensor& num,
                         torch::Tensor& den, torch::Tensor& max, int64_t tail) const;
  bool halves_output() const;

  torch::Tensor time_decay_, time_first_;  // [C]
  torch::Tensor mix_k_, mix_v_, mix_r_;    // mu [C]
  torch::Tensor ffn_mix_k_, ffn_mix_r_;    // mu' [C]
  torch::nn::Linear key_{nullptr}, value_{nullptr}, receptance_{nullptr}, output_{nullptr};
  torch::nn::Linear ffn_key_{nullptr}, ffn_receptance_{nullptr}, ffn_value_{nullptr};
  Norm ln0_{nullptr}, ln1_{nullptr}, ln2_{nullptr};  // ln0: layer 0 only
};
TORCH_MODULE(Rwkv4);

}  // namespace attn
