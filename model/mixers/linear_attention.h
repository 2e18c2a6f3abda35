// Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs";
// Shen et al. 2021, "Efficient Attention").
//
// With a positive feature map phi applied per head to queries and keys:
//
//   non-causal  y_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j) + eps)
//   causal      the same sums over j <= i only.
//
// The causal form is an RNN with a constant-size state per head:
//
//   S_i = S_{i-1} + phi(k_i) v_i^T      [d_head, d_head]
//   z_i = z_{i-1} + phi(k_i)            [d_head]
//   y_i = phi(q_i)^T S_i / (phi(q_i)^T z_i + eps)
//
// linear-decay (a per-head decay, as RetNet's retention, Sun et al. 2023,
// without its rotation): with g_h = exp(-softplus(rho_h)) learned per head,
//
//   S_i = g_h S_{i-1} + phi(k_i) v_i^T,   z_i = g_h z_{i-1} + phi(k_i)
//
// so key j enters query i's sums with weight g_h^(i-j): recent keys dominate
// and the state forgets at a learned rate instead of averaging everything
// it has seen. Feature map elu(x) + 1. g_h starts log-evenly from
// 1 - 2^-5 to 1 - 2^-12 across the heads.
//
// Feature maps:
//   linear-elu  phi(x) = elu(x) + 1 (Katharopoulos).
//   linear-exp  phi(x)_c = exp(x_c - max_c' x_c'): the softmax numerator over
//               the features of each query and key (Shen's normaliser taken
//               per token so that it stays causal). The shift keeps every
//               entry in (0, 1], so keys of any magnitude cannot overflow.
//
// Shapes: x [batch, time, d_model]; heads split d_model. The causal parallel
// form is computed in blocks of options.chunk tokens: quadratic inside a block,
// the running (S, z) across blocks, so cost is linear in time. Prefill and
// step on CPU, outside autograd, run the same sums fused
// (kernels::LinearAttentionPrefill, kernels::LinearAttentionStep).
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "model/mixers/mixer.h"

namespace attn::kernels {
struct LinearHeadsArgs;
}  // namespace attn::kernels

namespace attn {

// phi(x) over the last dimension (the head's features).
torch::Tensor LinearFeatureMap(const torch::Tensor& x, bool exp_feature);

class LinearAttentionImpl : public SequenceMixer {
 public:
  // options.kind: kLinearElu, kLinearExp (the feature map) or kLinearDecay.
  explicit LinearAttentionImpl(const MixerOptions& options);

  torch::Tensor forward(const torch::Tensor& x) override;

  // General attention: query [B, Tq, D] over key and value [B, Tk, D].
  // key_padding_mask: bool [B, Tk], true marks padding. Causal needs Tq == Tk.
  torch::Tensor attend(const torch::Tensor& query, const torch::Tensor& key,
                       const torch::Tensor& value, const torch::Tensor& key_padding_mask = {},
                       bool causal = false);

  MixerState initial_state(int64_t rows, torch::Device device) const override;
  torch::Tensor step(const torch::Tensor& x, MixerState& state,
                     const torch::Tensor& slots = {}) override;
  int64_t max_context() const override { return -1; }
  int64_t state_bytes_per_sequence(int64_t context) const override;

  bool exp_feature() const { return options_.kind == MixerKind::kLinearExp; }
  bool decayed() const { return options_.kind == MixerKind::kLinearDecay; }
  // g [H] = exp(-softplus(rho)) (differentiable); undefined without decay.
  torch::Tensor decay_factor() const;
  torch::nn::Linear in_proj() const { return in_proj_; }
  torch::nn::Linear out_proj() const { return out_proj_; }

 protected:
  torch::Tensor Prefill(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots,
                        int64_t keep) override;

 private:
  // Causal linear attention of q, k, v [B, H, T, Dh] continuing the running
  // sums s [B, H, Dh, Dh] and z [B, H, Dh], which are advanced. Returns
  // [B, H, T, Dh].
  torch::Tensor CausalBlocks(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             torch::Tensor& s, torch::Tensor& z) const;
  // Prefill() through kernels::LinearAttentionPrefill; x contiguous, `rows`
  // the state rows (CPU, long).
  torch::Tensor FusedPrefill(const torch::Tensor& x, MixerState& state, const torch::Tensor& rows,
                             int64_t keep);
  // The kernel arguments step and prefill share; qkv is in_proj's output,
  // decay decay_factor() (contiguous) or undefined.
  void FillHeadsArgs(int64_t batch, const int64_t* slots, const torch::Tensor& qkv,
                     const torch::Tensor& decay, MixerState& state,
                     kernels::LinearHeadsArgs* args) const;
  // step() on a GPU by the CUDA kernel (model/cuda), updating the pool's rows
  // in place; undefined when the kernel does not apply (no kernels in this
  // build, grad mode, not float32 on a GPU, a head too wide), and the
  // op-by-op path runs. `rows`: ResolveSlots's.
  torch::Tensor StepOnGpu(const torch::Tensor& x, MixerState& state, const torch::Tensor& rows);

  int64_t head_dim_;
  torch::nn::Linear in_proj_{nullptr};
  torch::nn::Linear out_proj_{nullptr};
  torch::Tensor decay_logit_;  // rho [H], linear-decay only
};
TORCH_MODULE(LinearAttention);

}  // namespace attn
