// Pre-norm Transformer blocks (Xiong et al. 2020: the norm sits inside the
// residual branch, x + f(Norm(x)), which trains without warm-up).
//
//   EncoderBlock     x = x + Attn(N(x)) ; x = x + FF(N(x))      (non-causal)
//   DecoderBlock     x = x + SelfAttn_causal(N(x)) ;
//                    x = x + CrossAttn(N(x), N(memory)) ; x = x + FF(N(x))
//   PerceiverBlock   (Jaegle et al. 2021, Perceiver IO encoder) a learned
//                    latent array L [n_latents, d] attends to the inputs:
//                    z = L + CrossAttn(N(L), N(x)) ; z = z + FF(N(z))
//                    -> [B, n_latents, d] whatever the input length.
//   InducedSetBlock  (Lee et al. 2019, Set Transformer ISAB) with m learned
//                    inducing points I: H = MAB(I, X), y = MAB(X, H), where
//                    MAB(A, B) = A' + FF(N(A')), A' = A + Attn(N(A), N(B)).
//                    Cost O(n m) and permutation-equivariant in X.
//
// Every block uses softmax (MultiHeadAttention) or linear attention, chosen
// by BlockOptions::attention; FF is model/layers/feed_forward.h. Shapes
// [B, T, d].
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "model/layers/feed_forward.h"
#include "model/layers/norms.h"
#include "model/mixers/linear_attention.h"
#include "model/mixers/multi_head_attention.h"

namespace attn {

enum class AttentionKind { kSoftmax, kLinearElu, kLinearExp };

struct BlockOptions {
  int64_t d_model = 256;
  int64_t heads = 4;
  int64_t ff_hidden = 1024;
  NormKind norm = NormKind::kLayerNorm;
  AttentionKind attention = AttentionKind::kSoftmax;
  int64_t max_context = 2048;  // for causal softmax self-attention
};

// Softmax or linear attention behind one call.
class AttentionLayerImpl : public torch::nn::Module {
 public:
  explicit AttentionLayerImpl(const BlockOptions& options);
  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& key_value,
                        const torch::Tensor& key_padding_mask = {}, bool causal = false);

 private:
  MultiHeadAttention softmax_{nullptr};
  LinearAttention linear_{nullptr};
};
TORCH_MODULE(AttentionLayer);

class EncoderBlockImpl : public torch::nn::Module {
 public:
  explicit EncoderBlockImpl(const BlockOptions& options);
  // key_padding_mask: bool [B, T], true marks padding.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& key_padding_mask = {});

 private:
  Norm norm1_{nullptr}, norm2_{nullptr};
  AttentionLayer attention_{nullptr};
  FeedForward ff_{nullptr};
};
TORCH_MODULE(EncoderBlock);

class DecoderBlockImpl : public torch::nn::Module {
 public:
  explicit DecoderBlockImpl(const BlockOptions& options);
  // x [B, T, d] (causal), memory [B, S, d]; memory_padding_mask bool [B, S].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& memory,
                        const torch::Tensor& memory_padding_mask = {});

 private:
  Norm norm_self_{nullptr}, norm_cross_{nullptr}, norm_memory_{nullptr}, norm_ff_{nullptr};
  AttentionLayer self_attention_{nullptr}, cross_attention_{nullptr};
  FeedForward ff_{nullptr};
};
TORCH_MODULE(DecoderBlock);

class PerceiverBlockImpl : public torch::nn::Module {
 public:
  PerceiverBlockImpl(const BlockOptions& options, int64_t latents);
  // inputs [B, T, d] -> [B, latents, d].
  torch::Tensor forward(const torch::Tensor& inputs, const torch::Tensor& input_padding_mask = {});

 private:
  torch::Tensor latents_;  // [latents, d]
  Norm norm_latent_{nullptr}, norm_input_{nullptr}, norm_ff_{nullptr};
  AttentionLayer cross_attention_{nullptr};
  FeedForward ff_{nullptr};
};
TORCH_MODULE(PerceiverBlock);

class InducedSetBlockImpl : public torch::nn::Module {
 public:
  InducedSetBlockImpl(const BlockOptions& options, int64_t inducing_points);
  // x [B, n, d] (a set) -> [B, n, d].
  torch::Tensor forward(const torch::Tensor& x);

 private:
  // MAB(a, b) with its own norms, attention and feed-forward.
  struct Mab {
    Norm norm_a{nullptr}, norm_b{nullptr}, norm_ff{nullptr};
    AttentionLayer attention{nullptr};
    FeedForward ff{nullptr};
  };
  Mab MakeMab(const BlockOptions& options, const std::string& prefix);
  torch::Tensor ApplyMab(Mab& mab, const torch::Tensor& a, const torch::Tensor& b);

  torch::Tensor inducing_;  // [m, d]
  Mab induce_, broadcast_;
};
TORCH_MODULE(InducedSetBlock);

}  // namespace attn
