// Grouped-query attention (Ainslie et al. 2023) with rotary positions (Su et
// al. 2021) or none (options.rope false: Granite 4.0-H's attention layers,
// which take their order from the recurrent layers around them) and,
// optionally, an RMSNorm of each head's queries and keys (LFM2's attention
// layers). H query heads of Dh = d_model / H channels
// share KV = kv_heads key/value heads; per token x_t at position p:
//
//   [q, k, v] = W_qkv x_t             q: H heads, k and v: KV heads of Dh
//   qk_norm:  q_h <- g_q * q_h / sqrt(mean(q_h^2) + eps)    (k_g likewise)
//   rotary:   for i < Dh / 2, angle = p * theta^(-2i / Dh),
//             (a_i, a_{i+Dh/2}) <- (a_i cos - a_{i+Dh/2} sin,
//                                   a_{i+Dh/2} cos + a_i sin)   for q and k
//   y_t = W_o [ sum_{j<=p} softmax_j(q_h . k_{g,j} / sqrt(Dh)) v_{g,j} ]_h
//         with g = h / (H / KV)
//
// Angles are computed in float64 from the integer position, so that late
// positions keep their precision. The state is a key/value cache of
// max_context positions of KV heads (kv_cache.h), keys stored rotated;
// it grows with the context. On the CPU outside autograd prefill and step
// run the fused cached-attention kernels (model/kernels/kernels.h) with
// grouped heads; elsewhere torch operations.
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <array>

#include "model/layers/norms.h"
#include "model/mixers/mixer.h"

namespace attn {

class GroupedAttentionImpl : public SequenceMixer {
 public:
  // options.kind must be kGqa; options.kv_heads (0: heads) must divide
  // heads, and d_model / heads must be even when options.rope.
  explicit GroupedAttentionImpl(const MixerOptions& options);

  torch::Tensor forward(const torch::Tensor& x) override;
  MixerState initial_state(int64_t rows, torch::Device device) const override;
  torch::Tensor step(const torch::Tensor& x, MixerState& state,
                     const torch::Tensor& slots = {}) override;
  // Only the lengths: positions past a row's length are never read.
  void ResetSlots(MixerState& state, const torch::Tensor& slots) const override;
  void ReleaseSlots(MixerState& state, const torch::Tensor& slots) const override;
  int64_t max_context() const override { return options_.max_context; }
  int64_t state_bytes_per_sequence(int64_t context) const override;

  int64_t kv_heads() const { return kv_heads_; }
  int64_t head_dim() const { return head_dim_; }

 protected:
  HeldPositions held_positions() const override { return {2, 0, -1}; }
  torch::Tensor Prefill(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots,
                        int64_t keep) override;

 private:
  // q [.., H, Dh], k and v [.., KV, Dh] of x [.., d] at `positions`
  // (int64, shaped as x's leading dims or broadcastable to them), normed
  // and rotated, packed as [.., (H + 2 KV) Dh].
  torch::Tensor Project(const torch::Tensor& x, const torch::Tensor& positions);
  // q, k, v of a packed tensor [B, T, (H + 2 KV) Dh] as [B, heads, T, Dh],
  // k and v repeated to H heads.
  std::array<torch::Tensor, 3> Split(const torch::Tensor& qkv) const;
  // step() where the CPU's fused kernels do not run (a GPU): the CUDA
  // kernel where it applies (CudaCachedStep, kv_cache.h), else the whole
  // batch in one set of ops, rows at different lengths masked
  // (AppendStepToCache).
  torch::Tensor StepByOps(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots);

  int64_t kv_heads_, head_dim_;
  torch::nn::Linear qkv_proj_{nullptr};  // d -> (H + 2 KV) Dh
  torch::nn::Linear out_proj_{nullptr};  // H Dh -> d
  Norm q_norm_{nullptr}, k_norm_{nullptr};
  // theta^(-2i / Dh), i < Dh / 2: float64 on the CPU, not a parameter or
  // buffer (it follows from the options); the copy on the device a GPU's
  // steps last asked for, made by the first of them (eager, before a CUDA
  // graph captures one: a capture may not copy from the host).
  torch::Tensor inv_freq_, inv_freq_device_;
  const torch::Tensor& InvFreqOn(torch::Device device);
};
TORCH_MODULE(GroupedAttention);

}  // namespace attn
