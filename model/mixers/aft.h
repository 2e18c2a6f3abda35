// Attention Free Transformer (Zhai et al. 2021), causal.
//
//   Q = X W_q, K = X W_k, V = X W_v,   per channel d:
//   Y_t = sigmoid(Q_t) * sum_{t'<=t} exp(K_t' + w_{t,t'}) V_t'
//                      / sum_{t'<=t} exp(K_t' + w_{t,t'})
//   y = Y W_o
//
// The variants differ only in the position bias w:
//   aft-full    w_{t,t'} learned for every pair (t' <= t < max_context).
//   aft-local   w_{t,t'} learned inside the band t - t' < s, 0 outside it:
//               keys further back still contribute, with bias 0.
//   aft-simple  w = 0.
//   aft-conv    w_{t,t'} = u_h[t - t'] inside the band, 0 outside it, with a
//               filter u_h per head of channels: it depends only on t - t',
//               so sequences may be arbitrarily long.
//
// All four are one computation with a window S (0 for simple, s for local
// and conv, max_context for full) and a bias table B [bias_heads, rows, S]
// read as w_{t,t'} = B[h(d), row(t), t - t'] for t - t' < S, 0 beyond:
// rows = 1 for conv/simple; rows = max_context, row(t) = t for local/full
// (for full, B[0, t, delta] = w_{t, t-delta}).
//
// Recurrent state per sequence (constant in context for simple and conv,
// bounded by S for local, by max_context for full):
//   c [D]          running max of every key seen, per channel;
//   num, den [D]   sums over keys that left the window, times exp(-c);
//   ring [S, D]    the last S keys as exp(K - c) and exp(K - c) V.
// Every exponent is relative to the running max of the prefix, so keys of
// magnitude 1000 neither overflow nor underflow; no maximum over the future
// of the sequence is ever taken. The parallel form (forward) computes blocks
// of options.chunk tokens using each query's own prefix maximum, continuing
// the same state, so forward, prefill and step agree to float precision.
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <utility>

#include "model/mixers/mixer.h"

namespace attn {

// The window S of an AFT kind (see above): 0, options.window or max_context.
int64_t AftWindow(const MixerOptions& options);

class AftImpl : public SequenceMixer {
 public:
  // options.kind: kAftFull, kAftLocal, kAftSimple or kAftConv.
  explicit AftImpl(const MixerOptions& options);

  torch::Tensor forward(const torch::Tensor& x) override;
  MixerState initial_state(int64_t rows, torch::Device device) const override;
  torch::Tensor step(const torch::Tensor& x, MixerState& state,
                     const torch::Tensor& slots = {}) override;
  int64_t max_context() const override;
  int64_t state_bytes_per_sequence(int64_t context) const override;

  // S: 0, s or max_context (see the file comment).
  int64_t window() const { return window_; }
  // The learned bias table [bias_heads, rows, S]; undefined for aft-simple.
  torch::Tensor position_bias() const { return position_bias_; }

  torch::nn::Linear in_proj() const { return in_proj_; }
  torch::nn::Linear out_proj() const { return out_proj_; }

 protected:
  // The rings: slots in dim 1, at most the window.
  HeldPositions held_positions() const override { return {1, 3, window_}; }
  torch::Tensor Prefill(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots,
                        int64_t keep) override;

 private:
  struct Sums;  // the gathered recurrent state of a batch of rows

  // exp(w) factors of the C queries at positions start.. over the `ring`
  // keys before them and the C keys of the block: [bias_heads, C, ring + C],
  // 0 for future keys and 1 for keys outside the window.
  torch::Tensor BiasFactors(int64_t start, int64_t chunk, int64_t ring,
                            const torch::TensorOptions& options) const;
  // One block: q, k, v [B, C, D] continuing `sums` at position `start`.
  torch::Tensor Block(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                      int64_t start, Sums& sums);
  // Blocks of options.chunk tokens over x, continuing `sums`.
  torch::Tensor Blocks(const torch::Tensor& x, int64_t start, Sums& sums);
  // The same blocks in one fused CPU pass (kernels::AftPrefill) that reads
  // and writes the state in place; `rows` are resolved CPU slot ids, all at
  // position `start`. Only the last `keep` tokens' outputs are computed.
  torch::Tensor FusedPrefill(const torch::Tensor& x, MixerState& state, const torch::Tensor& rows,
                             int64_t start, int64_t keep);
  // step() where the fused kernels do not run (a GPU): the whole batch in
  // one set of ops, each row at its own position.
  torch::Tensor StepByOps(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots);
  // The step by the CUDA kernel (model/cuda), in place on the pool's rows;
  // undefined where it does not apply (no kernels in this build, grad mode,
  // not float32 on a GPU) and the ops run. `rows`: ResolveSlots's.
  torch::Tensor StepOnGpu(const torch::Tensor& x, MixerState& state, const torch::Tensor& rows);
  // exp(w) factors of one query per row at positions t (int64 [B], x's
  // device) over the keys in the ring's first `span` slots, [B, span, D] (0
  // for a slot that holds no key yet), and over its own key, [B, D]. Needs
  // a window.
  std::pair<torch::Tensor, torch::Tensor> StepFactors(const torch::Tensor& t, int64_t span,
                                                      const torch::TensorOptions& options) const;

  int64_t window_;
  int64_t bias_heads_;
  torch::nn::Linear in_proj_{nullptr};   // d_model -> 3 d_model (Q, K, V)
  torch::nn::Linear out_proj_{nullptr};  // d_model -> d_model
  torch::Tensor position_bias_;
};
TORCH_MODULE(Aft);

}  // namespace attn
