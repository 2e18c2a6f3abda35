// RWKV-7 models from their public checkpoints, in the two layouts users
// download:
//   BlinkDL's .pth (RWKV-LM's trainer): emb.weight, blocks.N.ln0/ln1/ln2,
//     blocks.N.att.{x_r..x_g, w0 w1 w2, a0 a1 a2, v0 v1 v2, g1 g2, k_k k_a
//     r_k, receptance key value output, ln_x}, blocks.N.ffn.{x_k, key,
//     value}, ln_out, head.weight;
//   flash-linear-attention's Hugging Face layout (model_type "rwkv7"):
//     model.embeddings, model.layers.N.{pre_norm, attn_norm, ffn_norm},
//     model.layers.N.attn.{x_*, k_k k_a r_k, r_proj k_proj v_proj o_proj,
//     w_lora a_lora v_lora g_lora (lora.0 down, lora.2 up and bias),
//     g_norm}, model.layers.N.ffn.{x_k, key, value}, model.norm, lm_head.
// Sizes (width, layers, heads, low-rank ranks, channel mix, vocabulary)
// come from the tensors' shapes; every tensor of the model must be there
// with the shape the others imply, and none may be left over (BlinkDL's
// unused layer-0 v0, v1, v2 aside). Errors name the tensor.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoints/torch_checkpoint.h"
#include "model/lm/language_model.h"

namespace attn {

enum class Rwkv7Layout { kBlinkDl, kHuggingFace };

// What a Hugging Face config.json says beyond the tensors' shapes.
struct Rwkv7HfOptions {
  double norm_eps = 1e-5;       // LayerNorms'; the group norm's eps is head_dim * norm_eps
  bool tie_embeddings = false;  // tie_word_embeddings
  bool norm_first = true;       // layer 0 normalises the embedding (pre_norm)
};

// The RWKV generation a BlinkDL checkpoint's names belong to: 7 for RWKV-7
// (att.r_k); kInvalidArgument naming the version found (4, 5 or 6) or
// saying the names are no RWKV model's.
absl::Status CheckRwkvVersion(const TensorMap& tensors);

// The model the tensors describe, weights copied in (float32, eval mode).
// `hf` is read only for kHuggingFace. kInvalidArgument naming the first
// missing, misshaped or unused tensor.
absl::StatusOr<CausalLm> ImportRwkv7(const TensorMap& tensors, Rwkv7Layout layout,
                                     const Rwkv7HfOptions& hf = {});

// An initial state of RWKV state tuning: a .pth holding
// blocks.N.att.time_state [H, N, N] for every layer N of a model of
// `config`. Public loaders transpose its last two axes into the RNN's
// state, whose rows are value channels (model/mixers/rwkv7.h); so does
// this. Returns one sequence's state as CausalLmImpl::SaveRow lists it: per
// layer the length (0), the time mix's shift (zeros), S and the channel
// mix's shift (zeros). kNotFound or kDataLoss for the file, kInvalidArgument
// naming a missing, misshaped or extra tensor.
absl::StatusOr<std::vector<torch::Tensor>> ReadRwkv7InitialState(const std::string& path,
                                                                 const LmConfig& config);

// Parses a Hugging Face config.json of model_type "rwkv7"; kInvalidArgument
// naming the option it cannot serve (another model_type, hybrid attention
// layers, a value width unlike the model's, a LayerNorm eps other than 1e-5).
absl::StatusOr<Rwkv7HfOptions> ParseRwkv7HfConfig(const std::string& json);

}  // namespace attn
