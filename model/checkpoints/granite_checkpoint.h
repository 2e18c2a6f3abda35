// Hugging Face checkpoints of Granite 4.0-H (config.json model_type
// "granitemoehybrid", transformers' GraniteMoeHybridForCausalLM) mapped onto
// a hybrid CausalLm: Mamba-2 blocks (model/mixers/mamba2.h) each followed by
// the shared MLP (LmConfig::whole_block_ff), with a few grouped-query
// attention layers (grouped_attention.h, rotary positions or none) among
// them, each with RMSNorms and the same MLP; Tiny and Small add a mixture
// of experts beside every layer's MLP (model/layers/mixture_of_experts.h).
//
//   model.embed_tokens
//   model.layers.N.{input_layernorm, post_attention_layernorm,
//                   shared_mlp.{input_linear, output_linear}}
//   model.layers.N.mamba.{in_proj, conv1d, dt_bias, A_log, D, norm,
//                         out_proj}                       (mamba layers)
//   model.layers.N.self_attn.{q_proj, k_proj, v_proj, o_proj}
//                                                          (attention layers)
//   model.layers.N.block_sparse_moe.{input_linear [E, 2 I, d],
//     output_linear [E, d, I], router.layer}               (with experts)
//   model.norm                                             (the final norm)
//   lm_head                               (absent, or equal to the embedding,
//                                          when tied)
//
// Granite's four scalars are folded into the weights at import, which
// leaves the layers' equations the plain ones:
//
//   embedding_multiplier m_e   the embedding table times m_e (and, tied,
//                              the final norm's gain divided by m_e, so that
//                              the head still reads the table as stored)
//   residual_multiplier m_r    every layer's output projections times m_r
//                              (mamba out_proj, o_proj, output_linear, the
//                              experts' output_linear)
//   attention_multiplier m_a   the query rows times m_a sqrt(head size):
//                              the attention's 1/sqrt(Dh) then gives m_a
//   logits_scaling s           the final norm's gain divided by s
//
// Sizes come from config.json; every tensor must have the shape they imply
// and none may be left over. What the blocks do not implement (projection
// biases, B and C groups other than 1, RoPE scaling,
// an activation other than silu, a key unknown to Granite's config) is
// refused by name. The KV cache's capacity is max_position_embeddings, at
// most kGraniteMaxContext.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model/checkpoints/torch_checkpoint.h"
#include "model/lm/language_model.h"

namespace attn {

// The longest context an imported Granite keeps a cache for.
inline constexpr int64_t kGraniteMaxContext = 32768;

// The sizes and options config.json's text gives (vocab_size unset: the
// embedding's rows decide it). kInvalidArgument naming the key.
absl::StatusOr<LmConfig> ParseGraniteConfig(const std::string& config_json);

// The model config.json's text and `tensors` describe; sets `*layout`
// ("transformers-granitemoehybrid"). kInvalidArgument naming the key or
// tensor that does not fit.
absl::StatusOr<CausalLm> ImportGranite(const std::string& config_json, const TensorMap& tensors,
                                       std::string* layout);

}  // namespace attn
