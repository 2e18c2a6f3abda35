// Hugging Face checkpoints of LFM2 (config.json model_type "lfm2",
// transformers' Lfm2ForCausalLM) mapped onto a hybrid CausalLm: short-conv
// layers (model/mixers/short_conv.h) with a few grouped-query attention
// layers (grouped_attention.h) among them, each with RMSNorms and a SwiGLU
// feed-forward.
//
//   model.embed_tokens
//   model.layers.N.{operator_norm, ffn_norm, feed_forward.{w1, w2, w3}}
//   model.layers.N.conv.{in_proj, conv, out_proj}          (conv layers)
//   model.layers.N.self_attn.{q_proj, k_proj, v_proj, out_proj,
//                             q_layernorm, k_layernorm}    (attention layers)
//   model.embedding_norm                                   (the final norm)
//   lm_head                               (absent, or equal to the embedding,
//                                          when tied)
//
// Sizes come from config.json (the feed-forward's width as transformers
// adjusts it: block_auto_adjust_ff_dim, block_ffn_dim_multiplier,
// block_multiple_of); every tensor must have the shape they imply and none
// may be left over. What the blocks do not implement (convolution biases,
// RoPE scaling, a key unknown to LFM2's config) is refused by name. The KV
// cache's capacity is max_position_embeddings, at most kLfm2MaxContext.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model/checkpoints/torch_checkpoint.h"
#include "model/lm/language_model.h"

namespace attn {

// The longest context an imported LFM2 keeps a cache for (its
// max_position_embeddings is 128,000).
inline constexpr int64_t kLfm2MaxContext = 32768;

// The sizes and options config.json's text gives (vocab_size unset: the
// embedding's rows decide it). kInvalidArgument naming the key.
absl::StatusOr<LmConfig> ParseLfm2Config(const std::string& config_json);

// The model config.json's text and `tensors` describe; sets `*layout`
// ("transformers-lfm2"). kInvalidArgument naming the key or tensor that
// does not fit.
absl::StatusOr<CausalLm> ImportLfm2(const std::string& config_json, const TensorMap& tensors,
                                    std::string* layout);

}  // namespace attn
