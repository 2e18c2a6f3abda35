// LFM2's double-gated short convolution (Liquid AI 2025, the "conv" layers
// of LFM2): a causal depthwise convolution of L taps between two
// input-dependent gates. With d = d_model, per token t:
//
//   [b_t, c_t, u_t] = W_in x_t                      three vectors of d
//   v_t = b_t * u_t                                 (the input gate)
//   z_t = sum_{j<L} w[:, j] * v_{t-L+1+j}           (inputs before the
//                                                    sequence are zero)
//   y_t = W_out (c_t * z_t)                         (the output gate)
//
// A plain mixer: a MixerBlock adds its norm, residual and feed-forward
// (LFM2: RMSNorm and SwiGLU). Its state per sequence is constant in
// context, the last L - 1 gated inputs: tensors[0] [L - 1, d], oldest
// first. forward, prefill and step all run the same torch operations (the
// convolution is L multiply-adds per channel; the projections dominate).
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "model/mixers/mixer.h"

namespace attn {

class ShortConvImpl : public SequenceMixer {
 public:
  // options.kind must be kShortConv; options.conv_kernel is L (>= 2).
  explicit ShortConvImpl(const MixerOptions& options);

  torch::Tensor forward(const torch::Tensor& x) override;
  MixerState initial_state(int64_t rows, torch::Device device) const override;
  // Rows at any lengths step together: the convolution has no positions.
  torch::Tensor step(const torch::Tensor& x, MixerState& state,
                     const torch::Tensor& slots = {}) override;
  int64_t max_context() const override { return -1; }
  int64_t state_bytes_per_sequence(int64_t context) const override;

 protected:
  torch::Tensor Prefill(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots,
                        int64_t keep) override;

 private:
  // The last `keep` outputs of x [B, T, d] continuing `window` (the last
  // L - 1 gated inputs [B, L - 1, d]), which it advances.
  torch::Tensor Run(const torch::Tensor& x, torch::Tensor& window, int64_t keep) const;
  // Run over rows `slots` of `state`, which advance by x's T tokens.
  torch::Tensor Continue(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots,
                         int64_t keep);

  torch::nn::Linear in_proj_{nullptr}, out_proj_{nullptr};
  torch::Tensor conv_weight_;  // [d, 1, L], Conv1d's layout
};
TORCH_MODULE(ShortConv);

}  // namespace attn
