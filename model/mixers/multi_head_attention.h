// Scaled dot-product and multi-head attention (Vaswani et al. 2017) with
// optional ALiBi distance biases (Press et al. 2022).
//
//   Attention(Q, K, V) = softmax(Q K^T / sqrt(d_head) + B) V
//   head_h = Attention(X W_q^h, X W_k^h, X W_v^h),  y = [head_1 .. head_H] W_o
//
// B is the sum of
//   - masks: -inf where key j is padding or (causal) lies after query i;
//   - ALiBi (optional): B_ij = -m_h |i - j|, slopes m_h = 2^(-8h/H) for
//     h = 1..H (a geometric sequence), fixed or learned as log m_h.
//
// Shapes: x [batch, time, d_model]. As a SequenceMixer the module is causal
// self-attention whose state is a key/value cache of `max_context` positions
// per sequence: k, v [N, H, max_context, d_head]. A step costs O(L d_model) at
// length L, so decoding time grows with context; the cache bounds it.
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "model/mixers/mixer.h"

namespace attn {

// softmax(q k^T * scale + bias) v for q [.., Tq, Dh], k and v [.., Tk, Dh].
// `bias` is additive and broadcastable to [.., Tq, Tk] (undefined: none);
// -inf entries mask. A query whose keys are all masked gets zeros; a caller
// whose bias cannot mask a whole row (causal masks never do) passes
// `rows_may_be_all_masked` false to skip that pass over the weights.
torch::Tensor ScaledDotProductAttention(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& bias,
                                        bool rows_may_be_all_masked = true);

// The ALiBi slopes m_h = 2^(-8h/H), h = 1..H.
torch::Tensor AlibiSlopes(int64_t heads);

// Additive [H, Tq, Tk] ALiBi bias -m_h |i - j| for queries at positions
// query_offset + 0..Tq-1 and keys at positions 0..Tk-1.
torch::Tensor AlibiBias(const torch::Tensor& slopes, int64_t tq, int64_t tk, int64_t query_offset);

// Additive [Tq, Tk] mask: 0 where key j <= query_offset + i, -inf elsewhere.
torch::Tensor CausalBias(int64_t tq, int64_t tk, int64_t query_offset,
                         const torch::TensorOptions& options);

// [Tq, Tk] bool, true where key j is later than query query_offset + i.
torch::Tensor FutureKeys(int64_t tq, int64_t tk, int64_t query_offset, torch::Device device);

class MultiHeadAttentionImpl : public SequenceMixer {
 public:
  // options.kind kMhaAlibi turns ALiBi on; options.learn_alibi_slopes trains
  // the slopes.
  explicit MultiHeadAttentionImpl(const MixerOptions& options);

  torch::Tensor forward(const torch::Tensor& x) override;

  // General (self or cross) attention: query [B, Tq, D] attends to key and
  // value [B, Tk, D]. key_padding_mask: bool [B, Tk], true marks padding.
  // Causal: query i sees keys j <= i + (Tk - Tq).
  torch::Tensor attend(const torch::Tensor& query, const torch::Tensor& key,
                       const torch::Tensor& value, const torch::Tensor& key_padding_mask = {},
                       bool causal = false);

  MixerState initial_state(int64_t rows, torch::Device device) const override;
  torch::Tensor step(const torch::Tensor& x, MixerState& state,
                     const torch::Tensor& slots = {}) override;
  // Only the lengths: a row's cache beyond its length is never read, and
  // zeroing it wrote 5 MB per layer for every admitted request at a
  // 4096-token capacity.
  void ResetSlots(MixerState& state, const torch::Tensor& slots) const override;
  void ReleaseSlots(MixerState& state, const torch::Tensor& slots) const override;
  int64_t max_context() const override { return options_.max_context; }
  int64_t state_bytes_per_sequence(int64_t context) const override;

  bool uses_alibi() const { return options_.kind == MixerKind::kMhaAlibi; }
  // The per-head ALiBi slopes [H]; undefined without ALiBi.
  torch::Tensor alibi_slopes() const;

  torch::nn::Linear in_proj() const { return in_proj_; }
  torch::nn::Linear out_proj() const { return out_proj_; }

 protected:
  // The cache: positions in dim 2 of k and v.
  HeldPositions held_positions() const override { return {2, 0, -1}; }
  torch::Tensor Prefill(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots,
                        int64_t keep) override;

 private:
  // Attention of q [B,H,Tq,Dh] over k, v [B,H,Tk,Dh], then merge and project.
  torch::Tensor AttendHeads(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& key_padding_mask, bool causal,
                            int64_t query_offset);
  // step() where the CPU's fused kernels do not run (a GPU): the CUDA
  // kernel where it applies (CudaCachedStep, kv_cache.h), else the whole
  // batch in one set of ops, rows at different lengths masked
  // (AppendStepToCache).
  torch::Tensor StepByOps(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots);

  int64_t head_dim_;
  torch::nn::Linear in_proj_{nullptr};   // d_model -> 3 d_model (q, k, v)
  torch::nn::Linear out_proj_{nullptr};  // d_model -> d_model
  torch::Tensor log_slopes_;             // [H] ALiBi log m_h (parameter or buffer)
};
TORCH_MODULE(MultiHeadAttention);

}  // namespace attn
