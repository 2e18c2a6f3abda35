// AFT with a decayed past (aft-decay): the Attention Free Transformer (Zhai
// et al. 2021) with AFT-conv's learned filter inside a window of s tokens
// and a learned linear decay of the position bias beyond it:
//
//   Y_t = sigmoid(Q_t) * sum_{t'<=t} exp(K_t' + w_{t,t'}) V_t'
//                      / sum_{t'<=t} exp(K_t' + w_{t,t'})
//   w_{t,t'} = u_h[t - t']                     for t - t' < s
//            = -lambda_d * (t - t' - s)        for t - t' >= s
//   lambda_d = -log(a_d),  a_d = exp(-softplus(rho_d))   (lambda_d >= 0)
//
// per channel d, with u_h a filter per head of channels. Past the window AFT-
// conv gives every key weight exp(0) forever, so its carried sums become an
// ever longer plain average; here each key fades at its channel's rate, as in
// RWKV, and the model chooses per channel how far back to look. The decay is
// defined through the float32 factor a_d (lambda_d is its exact logarithm),
// so that the recurrence below, which multiplies by a_d once per token,
// computes exactly the weights of the formula.
//
// Recurrent state per sequence, constant in context: ((3 + 2 s) D floats)
//   ring_k, ring_v [s, D]  the last s keys and values, raw (slot = t mod s);
//   ref, num, den [D]      the keys that left the window, as
//                          num = sum exp(K_t' + w_{t,t'} - ref) V_t', den alike.
// ref is a log reference kept near the sums' own magnitude, and every output
// subtracts the largest exponent it sees, so keys of magnitude 1000 and
// decays from 1e-6 to 30 neither overflow nor underflow (the running-maximum
// scheme of AFT, except that the maximum may fall as old keys fade).
// model/kernels/kernels.h (AftDecay) gives the step by step recurrence; the
// parallel form (forward) computes blocks of options.chunk tokens from the
// same state, so forward, prefill and step agree to float precision.
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "model/mixers/mixer.h"

namespace attn {

class AftDecayImpl : public SequenceMixer {
 public:
  // options.kind must be kAftDecay; options.window is s (>= 1).
  explicit AftDecayImpl(const MixerOptions& options);

  torch::Tensor forward(const torch::Tensor& x) override;
  MixerState initial_state(int64_t rows, torch::Device device) const override;
  torch::Tensor step(const torch::Tensor& x, MixerState& state,
                     const torch::Tensor& slots = {}) override;
  int64_t max_context() const override { return -1; }
  int64_t state_bytes_per_sequence(int64_t context) const override;

  int64_t window() const { return options_.window; }
  // u [heads, s].
  torch::Tensor position_bias() const { return position_bias_; }
  // rho [D], the parameter behind the decay.
  torch::Tensor decay_logit() const { return decay_logit_; }
  // a [D] = exp(-softplus(rho)), the per-token decay factor (differentiable).
  torch::Tensor decay_factor() const;

  torch::nn::Linear in_proj() const { return in_proj_; }
  torch::nn::Linear out_proj() const { return out_proj_; }

 protected:
  // The rings: slots in dim 1, at most the window.
  HeldPositions held_positions() const override { return {1, 3, options_.window}; }
  torch::Tensor Prefill(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots,
                        int64_t keep) override;

 private:
  struct Sums;  // the gathered recurrent state of a batch of rows

  // One block: q, k, v [B, C, D] continuing `sums`; lambda [D] and the
  // window's filter as [s, D], computed once per call by Blocks.
  torch::Tensor Block(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                      const torch::Tensor& lambda, const torch::Tensor& filter, Sums& sums) const;
  // Blocks of options.chunk tokens over x, continuing `sums`.
  torch::Tensor Blocks(const torch::Tensor& x, Sums& sums);
  // kernels::AftDecay over x [B, T, D] for rows `rows` (CPU ids, null for
  // 0..B-1), in place on `state`; the last `keep` tokens' outputs.
  torch::Tensor Fused(const torch::Tensor& x, MixerState& state, const int64_t* rows, int64_t keep);
  // The window's filter u_h(d)[delta] as [s, D], in `dtype`.
  torch::Tensor WindowFilter(torch::ScalarType dtype) const;
  // step() where the fused kernels do not run (a GPU): the whole batch in
  // one set of ops, each row at its own position.
  torch::Tensor StepByOps(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots);
  // The step by the CUDA kernel (model/cuda), in place on the pool's rows;
  // undefined where it does not apply (no kernels in this build, grad mode,
  // not float32 on a GPU) and the ops run. `rows`: ResolveSlots's.
  torch::Tensor StepOnGpu(const torch::Tensor& x, MixerState& state, const torch::Tensor& rows);

  torch::nn::Linear in_proj_{nullptr};   // d_model -> 3 d_model (Q, K, V)
  torch::nn::Linear out_proj_{nullptr};  // d_model -> d_model
  torch::Tensor position_bias_;          // u [heads, s]
  torch::Tensor decay_logit_;            // rho [D]
};
TORCH_MODULE(AftDecay);

}  // namespace attn
