// Transformer-XL relative multi-head attention with segment memory
// (Dai et al. 2019).
//
// Per head, query i and key j (absolute positions, j <= i):
//
//   A_ij = (q_i + u)^T k_j  +  (q_i + v)^T W_r R_{i-j}
//
// which is the paper's (a) + (c) content terms and (b) + (d) position terms;
// q = x W_q, k = x W_k, R is the sinusoidal embedding of the distance i - j,
// u and v are learned per head. y_i = softmax_j(A_i / sqrt(d_head)) V W_o.
// Entries with j > i are masked: the relative shift is a gather by distance
// whose out-of-range entries are masked, never wrapped around.
//
// Segment recurrence: forward_with_memory(x, memory) lets a segment attend
// over [memory; x], memory being the layer inputs of up to mem_len earlier
// positions (no gradient flows into it), and returns the next memory.
//
// As a SequenceMixer the keys and values of every earlier position are cached
// (they carry no absolute position), up to max_context per sequence, so
// step() equals forward() over the whole prefix.
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "model/mixers/mixer.h"

namespace attn {

class RelativeMultiHeadAttentionImpl : public SequenceMixer {
 public:
  explicit RelativeMultiHeadAttentionImpl(const MixerOptions& options);

  torch::Tensor forward(const torch::Tensor& x) override;

  // x [B, T, D], memory [B, M, D] (undefined or M = 0: none). Returns the
  // output [B, T, D] and the next memory: the last mem_len rows of
  // [memory; x], detached.
  std::pair<torch::Tensor, torch::Tensor> forward_with_memory(const torch::Tensor& x,
                                                              const torch::Tensor& memory);

  MixerState initial_state(int64_t rows, torch::Device device) const override;
  void ResetSlots(MixerState& state, const torch::Tensor& slots) const override;
  void ReleaseSlots(MixerState& state, const torch::Tensor& slots) const override;
  torch::Tensor step(const torch::Tensor& x, MixerState& state,
                     const torch::Tensor& slots = {}) override;
  int64_t max_context() const override { return options_.max_context; }
  int64_t state_bytes_per_sequence(int64_t context) const override;

  torch::nn::Linear in_proj() const { return in_proj_; }
  torch::nn::Linear out_proj() const { return out_proj_; }
  torch::nn::Linear position_proj() const { return r_proj_; }
  const torch::Tensor& content_bias() const { return u_; }
  const torch::Tensor& position_bias() const { return v_; }
  // The sinusoidal embeddings R of distances 0..max_context-1: [L, D].
  const torch::Tensor& distance_embeddings() const { return distances_; }

 protected:
  // The cache: positions in dim 2 of k and v.
  HeldPositions held_positions() const override { return {2, 0, -1}; }
  torch::Tensor Prefill(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots,
                        int64_t keep) override;

 private:
  // W_r R for distances 0..count-1, head-major: [H, count, Dh].
  torch::Tensor ProjectedDistances(int64_t count);
  // step() where the CPU's fused kernels do not run (a GPU): the CUDA
  // kernel where it applies (CudaCachedStep, kv_cache.h), else the whole
  // batch in one set of ops, rows at different lengths masked
  // (AppendStepToCache).
  torch::Tensor StepByOps(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots);
  // Attention of q [B, H, Tq, Dh] at positions offset.. over k, v
  // [B, H, Tk, Dh] at positions 0..Tk-1; returns [B, T, D] after W_o.
  torch::Tensor Attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       int64_t offset);

  int64_t head_dim_;
  torch::nn::Linear in_proj_{nullptr};   // d_model -> 3 d_model (q, k, v)
  torch::nn::Linear r_proj_{nullptr};    // W_r: d_model -> d_model, no bias
  torch::nn::Linear out_proj_{nullptr};  // W_o
  torch::Tensor u_, v_;                  // [H, Dh]
  torch::Tensor distances_;              // buffer [max_context, D]

  // W_r R for all distances, reused by step() while W_r is unchanged.
  // Guarded: concurrent steps of disjoint rows share it.
  absl::Mutex projected_mutex_;
  torch::Tensor projected_cache_ ABSL_GUARDED_BY(projected_mutex_);
  int64_t projected_version_ ABSL_GUARDED_BY(projected_mutex_) = -1;
  const void* projected_data_ ABSL_GUARDED_BY(projected_mutex_) = nullptr;
};
TORCH_MODULE(RelativeMultiHeadAttention);

}  // namespace attn
