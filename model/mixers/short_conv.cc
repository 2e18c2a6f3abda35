#include "model/mixers/short_conv.h"

#include <torch/torch.h>

#include <cmath>

#include "model/layers/dense.h"

namespace attn {

ShortConvImpl::ShortConvImpl(const MixerOptions& options) : SequenceMixer(options) {
  TORCH_CHECK(options.kind == MixerKind::kShortConv, "ShortConv needs kind short-conv");
  TORCH_CHECK(options.conv_kernel >= 2, "short-conv: conv_kernel must be at least 2, got ",
              options.conv_kernel);
  const int64_t d = options.d_model;
  in_proj_ =
      register_module("in_proj", torch::nn::Linear(torch::nn::LinearOptions(d, 3 * d).bias(false)));
  out_proj_ =
      register_module("out_proj", torch::nn::Linear(torch::nn::LinearOptions(d, d).bias(false)));
  const double bound = 1.0 / std::sqrt(static_cast<double>(options.conv_kernel));
  conv_weight_ = register_parameter(
      "conv_weight", torch::empty({d, 1, options.conv_kernel}).uniform_(-bound, bound));
}

int64_t ShortConvImpl::state_bytes_per_sequence(int64_t /*context*/) const {
  return (options_.conv_kernel - 1) * options_.d_model * static_cast<int64_t>(sizeof(float)) +
         static_cast<int64_t>(sizeof(int64_t));
}

MixerState ShortConvImpl::initial_state(int64_t rows, torch::Device device) const {
  const auto opts = torch::TensorOptions().dtype(torch::kFloat).device(device);
  MixerState state;
  state.length = torch::zeros({rows}, opts.dtype(torch::kLong));
  state.tensors = {torch::zeros({rows, options_.conv_kernel - 1, options_.d_model}, opts)};
  return state;
}

torch::Tensor ShortConvImpl::Run(const torch::Tensor& x, torch::Tensor& window,
                                 int64_t keep) const {
  const int64_t d = options_.d_model, width = options_.conv_kernel, time = x.size(1);
  const auto projected = Dense(x, in_proj_);  // [B, T, 3d]: b, c, u
  const auto gated = projected.narrow(2, 0, d) * projected.narrow(2, 2 * d, d);
  const auto inputs = torch::cat({window, gated}, 1);  // [B, L - 1 + T, d]
  window = inputs.narrow(1, time, width - 1).clone();
  // Only the last `keep` outputs: position t reads inputs t .. t + L - 1.
  const int64_t first = time - keep;
  const auto weight = conv_weight_.squeeze(1);  // [d, L]
  torch::Tensor z = inputs.narrow(1, first, keep) * weight.select(1, 0);
  for (int64_t j = 1; j < width; ++j) {
    z = torch::addcmul(z, inputs.narrow(1, first + j, keep), weight.select(1, j));
  }
  return Dense(projected.narrow(1, first, keep).narrow(2, d, d) * z, out_proj_);
}

torch::Tensor ShortConvImpl::forward(const torch::Tensor& x) {
  torch::Tensor window =
      torch::zeros({x.size(0), options_.conv_kernel - 1, options_.d_model}, x.options());
  return Run(x, window, x.size(1));
}

torch::Tensor ShortConvImpl::Continue(const torch::Tensor& x, MixerState& state,
                                      const torch::Tensor& slots, int64_t keep) {
  const torch::Tensor ids = ResolveSlots(state, slots, x.size(0));
  const auto index = RowsOn(ids, state.length.device());
  torch::Tensor window = state.tensors[0].index_select(0, index);
  torch::Tensor y = Run(x, window, keep);
  state.tensors[0].index_copy_(0, index, window);
  AdvanceRows(state, index, x.size(1));
  return y;
}

torch::Tensor ShortConvImpl::Prefill(const torch::Tensor& x, MixerState& state,
                                     const torch::Tensor& slots, int64_t keep) {
  return Continue(x, state, slots, keep);
}

torch::Tensor ShortConvImpl::step(const torch::Tensor& x, MixerState& state,
                                  const torch::Tensor& slots) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) == options_.d_model, "step expects x [B, ",
              options_.d_model, "], got ", x.sizes());
  return Continue(x.unsqueeze(1), state, slots, 1).squeeze(1);
}

}  // namespace attn
