// Hugging Face checkpoints of Mamba-2 and RWKV-4 mapped onto this
// library's mamba2 and rwkv4 blocks (model/mixers/mamba2.h, rwkv4.h).
//
//   Mamba-2, transformers' layout (config.json model_type "mamba2",
//     Mamba2ForCausalLM): backbone.embeddings, backbone.layers.N.{norm,
//     mixer.{in_proj, conv1d, dt_bias, A_log, D, norm, out_proj}},
//     backbone.norm_f, lm_head (absent or equal when tied);
//   Mamba-2, mamba_ssm's layout (config.json with d_model, n_layer and
//     ssm_cfg {"layer": "Mamba2", ...}): the same with backbone.embedding;
//   RWKV-4 (model_type "rwkv", RwkvForCausalLM): rwkv.embeddings,
//     rwkv.blocks.N.{pre_ln (N = 0), ln1, ln2, attention.{time_decay,
//     time_first, time_mix_key/value/receptance, key, value, receptance,
//     output}, feed_forward.{time_mix_key/receptance, key, receptance,
//     value}}, rwkv.ln_out, head.
//
// Sizes come from config.json and every tensor must have the shape they
// imply; none may be left over. Options the blocks do not implement
// (another activation, biases on the projections, a time-step limit, a
// LayerNorm eps other than 1e-5, attention layers in a hybrid, ...) are
// refused by name. RWKV-4's rescale_every R is applied as transformers
// applies it at inference: block N's output and feed-forward value weights
// divided by 2^(N / R), and the hidden state halved after every R-th block.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model/checkpoints/torch_checkpoint.h"
#include "model/lm/language_model.h"

namespace attn {

// What a config.json says about a Mamba-2 or RWKV-4 model.
struct HfModelSpec {
  LmConfig config;            // sizes; vocab_size from the embedding
  std::string layout;         // "transformers-mamba2", "mamba_ssm-mamba2", "transformers-rwkv4"
  std::string prefix;         // of the tensor names: "backbone." or "rwkv."
  std::string embedding;      // the embedding's name
  bool conv_bias = true;      // Mamba-2's use_conv_bias
  int64_t eos_token_id = -1;  // config.json's, if any
};

// The model_type of config.json's text (JSON as Python writes it, with
// Infinity and NaN): its "model_type", or "mamba2" for mamba_ssm's config
// (no model_type; d_model and ssm_cfg); empty when it names none.
// kInvalidArgument for text that is not a JSON object.
absl::StatusOr<std::string> HfModelType(const std::string& config_json);

// config.json's text of a Mamba-2 or RWKV-4 model; kInvalidArgument naming
// the option or key that cannot be served.
absl::StatusOr<HfModelSpec> ParseHfModelSpec(const std::string& config_json);

// The model the tensors hold; kInvalidArgument naming the first missing,
// misshaped or unused tensor.
absl::StatusOr<CausalLm> ImportHfModel(HfModelSpec spec, const TensorMap& tensors);

}  // namespace attn
