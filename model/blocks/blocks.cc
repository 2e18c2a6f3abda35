#include "model/blocks/blocks.h"

#include <torch/torch.h>

#include "model/kernels/kernels.h"
#include "model/layers/dense.h"

namespace attn {

AttentionLayerImpl::AttentionLayerImpl(const BlockOptions& options) {
  MixerOptions mixer;
  mixer.d_model = options.d_model;
  mixer.heads = options.heads;
  mixer.max_context = options.max_context;
  if (options.attention == AttentionKind::kSoftmax) {
    mixer.kind = MixerKind::kMha;
    softmax_ = register_module("softmax", MultiHeadAttention(mixer));
  } else {
    mixer.kind = options.attention == AttentionKind::kLinearElu ? MixerKind::kLinearElu
                                                                : MixerKind::kLinearExp;
    linear_ = register_module("linear", LinearAttention(mixer));
  }
}

torch::Tensor AttentionLayerImpl::forward(const torch::Tensor& query,
                                          const torch::Tensor& key_value,
                                          const torch::Tensor& key_padding_mask, bool causal) {
  if (softmax_) return softmax_->attend(query, key_value, key_value, key_padding_mask, causal);
  return linear_->attend(query, key_value, key_value, key_padding_mask, causal);
}

EncoderBlockImpl::EncoderBlockImpl(const BlockOptions& o) {
  norm1_ = register_module("norm1", Norm(o.norm, o.d_model));
  attention_ = register_module("attention", AttentionLayer(o));
  norm2_ = register_module("norm2", Norm(o.norm, o.d_model));
  ff_ = register_module("ff", FeedForward(o.d_model, o.ff_hidden));
}

torch::Tensor EncoderBlockImpl::forward(const torch::Tensor& x,
                                        const torch::Tensor& key_padding_mask) {
  auto h = norm1_->forward(x);
  auto y = x + attention_->forward(h, h, key_padding_mask);
  return y + ff_->forward(norm2_->forward(y));
}

DecoderBlockImpl::DecoderBlockImpl(const BlockOptions& o) {
  norm_self_ = register_module("norm_self", Norm(o.norm, o.d_model));
  self_attention_ = register_module("self_attention", AttentionLayer(o));
  norm_cross_ = register_module("norm_cross", Norm(o.norm, o.d_model));
  norm_memory_ = register_module("norm_memory", Norm(o.norm, o.d_model));
  cross_attention_ = register_module("cross_attention", AttentionLayer(o));
  norm_ff_ = register_module("norm_ff", Norm(o.norm, o.d_model));
  ff_ = register_module("ff", FeedForward(o.d_model, o.ff_hidden));
}

torch::Tensor DecoderBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& memory,
                                        const torch::Tensor& memory_padding_mask) {
  auto h = norm_self_->forward(x);
  auto y = x + self_attention_->forward(h, h, {}, /*causal=*/true);
  y = y + cross_attention_->forward(norm_cross_->forward(y), norm_memory_->forward(memory),
                                    memory_padding_mask);
  return y + ff_->forward(norm_ff_->forward(y));
}

PerceiverBlockImpl::PerceiverBlockImpl(const BlockOptions& o, int64_t latents) {
  latents_ = register_parameter("latents", torch::randn({latents, o.d_model}) * 0.02);
  norm_latent_ = register_module("norm_latent", Norm(o.norm, o.d_model));
  norm_input_ = register_module("norm_input", Norm(o.norm, o.d_model));
  cross_attention_ = register_module("cross_attention", AttentionLayer(o));
  norm_ff_ = register_module("norm_ff", Norm(o.norm, o.d_model));
  ff_ = register_module("ff", FeedForward(o.d_model, o.ff_hidden));
}

torch::Tensor PerceiverBlockImpl::forward(const torch::Tensor& inputs,
                                          const torch::Tensor& input_padding_mask) {
  auto z = latents_.unsqueeze(0).expand({inputs.size(0), -1, -1});
  z = z + cross_attention_->forward(norm_latent_->forward(z), norm_input_->forward(inputs),
                                    input_padding_mask);
  return z + ff_->forward(norm_ff_->forward(z));
}

InducedSetBlockImpl::InducedSetBlockImpl(const BlockOptions& o, int64_t inducing_points) {
  inducing_ = register_parameter("inducing", torch::randn({inducing_points, o.d_model}) * 0.02);
  induce_ = MakeMab(o, "induce");
  broadcast_ = MakeMab(o, "broadcast");
}

InducedSetBlockImpl::Mab InducedSetBlockImpl::MakeMab(const BlockOptions& o,
                                                      const std::string& prefix) {
  Mab mab;
  mab.norm_a = register_module(prefix + "_norm_a", Norm(o.norm, o.d_model));
  mab.norm_b = register_module(prefix + "_norm_b", Norm(o.norm, o.d_model));
  mab.attention = register_module(prefix + "_attention", AttentionLayer(o));
  mab.norm_ff = register_module(prefix + "_norm_ff", Norm(o.norm, o.d_model));
  mab.ff = register_module(prefix + "_ff", FeedForward(o.d_model, o.ff_hidden));
  return mab;
}

torch::Tensor InducedSetBlockImpl::ApplyMab(Mab& mab, const torch::Tensor& a,
                                            const torch::Tensor& b) {
  auto h = a + mab.attention->forward(mab.norm_a->forward(a), mab.norm_b->forward(b));
  return h + mab.ff->forward(mab.norm_ff->forward(h));
}

torch::Tensor InducedSetBlockImpl::forward(const torch::Tensor& x) {
  auto inducing = inducing_.unsqueeze(0).expand({x.size(0), -1, -1});
  auto summary = ApplyMab(induce_, inducing, x);  // [B, m, d]
  return ApplyMab(broadcast_, x, summary);
}

}  // namespace attn
