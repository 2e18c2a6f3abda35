#include "model/checkpoints/lfm2_checkpoint.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "model/checkpoints/tensor_mapping.h"
#include "nlohmann/json.hpp"

namespace attn {
namespace {

using Json = nlohmann::json;

absl::Status Refuse(absl::string_view key, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("config.json: ", key, ": ", what));
}

// Keys of LFM2's configs that change nothing here: initialisation,
// token ids, versions. Every other key is read or checked below.
const std::set<std::string>& IgnoredKeys() {
  static const auto* keys = new std::set<std::string>{"architectures",
                                                      "model_type",
                                                      "torch_dtype",
                                                      "dtype",
                                                      "transformers_version",
                                                      "initializer_range",
                                                      "use_cache",
                                                      "bos_token_id",
                                                      "pad_token_id",
                                                      "eos_token_id",
                                                      "block_mlp_init_scale",
                                                      "block_out_init_scale",
                                                      "block_use_xavier_init",
                                                      "conv_use_xavier_init",
                                                      "_name_or_path"};
  return *keys;
}

const std::set<std::string>& ReadKeys() {
  static const auto* keys = new std::set<std::string>{"vocab_size",
                                                      "hidden_size",
                                                      "num_hidden_layers",
                                                      "num_attention_heads",
                                                      "num_key_value_heads",
                                                      "num_heads",
                                                      "head_dim",
                                                      "intermediate_size",
                                                      "block_ff_dim",
                                                      "block_multiple_of",
                                                      "block_ffn_dim_multiplier",
                                                      "block_auto_adjust_ff_dim",
                                                      "norm_eps",
                                                      "block_norm_eps",
                                                      "conv_L_cache",
                                                      "conv_bias",
                                                      "conv_dim",
                                                      "conv_dim_out",
                                                      "block_dim",
                                                      "block_use_swiglu",
                                                      "use_pos_enc",
                                                      "layer_types",
                                                      "full_attn_idxs",
                                                      "rope_theta",
                                                      "theta",
                                                      "rope_parameters",
                                                      "rope_scaling",
                                                      "tie_word_embeddings",
                                                      "tie_embedding",
                                                      "max_position_embeddings"};
  return *keys;
}

// The positive integer at `key`, `fallback` when absent or null (-1: required).
absl::StatusOr<int64_t> Int(const Json& c, const char* key, int64_t fallback = -1) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) {
    if (fallback < 0) return Refuse(key, "missing");
    return fallback;
  }
  if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > (1 << 24)) {
    return Refuse(key, absl::StrCat("must be a positive integer, got ", it->dump()));
  }
  return it->get<int64_t>();
}

absl::StatusOr<double> Number(const Json& c, const char* key, double fallback) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return fallback;
  if (!it->is_number()) return Refuse(key, absl::StrCat("must be a number, got ", it->dump()));
  return it->get<double>();
}

// Refuses `key` unless absent, null or equal to `expected`.
absl::Status Agrees(const Json& c, const char* key, const Json& expected, absl::string_view why) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null() || *it == expected) return absl::OkStatus();
  if (it->is_number() && expected.is_number() &&
      std::abs(it->get<double>() - expected.get<double>()) < 1e-12) {
    return absl::OkStatus();
  }
  return Refuse(key, absl::StrCat(it->dump(), " is not supported (", why, ")"));
}

// transformers' Lfm2MLP width.
absl::StatusOr<int64_t> FeedForwardWidth(const Json& c) {
  absl::StatusOr<int64_t> width =
      c.contains("block_ff_dim") ? Int(c, "block_ff_dim") : Int(c, "intermediate_size");
  absl::StatusOr<int64_t> multiple = Int(c, "block_multiple_of", 256);
  if (!width.ok()) return width.status();
  if (!multiple.ok()) return multiple.status();
  auto adjust = c.find("block_auto_adjust_ff_dim");
  if (adjust != c.end() && !adjust->is_null() && !adjust->is_boolean()) {
    return Refuse("block_auto_adjust_ff_dim", "must be true or false");
  }
  if (adjust != c.end() && *adjust == false) return *width;
  int64_t hidden = 2 * *width / 3;
  // transformers scales and rounds only with a multiplier (its default is
  // 1.0; an explicit null has none).
  auto multiplier = c.find("block_ffn_dim_multiplier");
  if (multiplier == c.end() || !multiplier->is_null()) {
    absl::StatusOr<double> factor = Number(c, "block_ffn_dim_multiplier", 1.0);
    if (!factor.ok()) return factor.status();
    if (!(*factor > 0 && *factor <= 64)) {
      return Refuse("block_ffn_dim_multiplier", absl::StrCat("must be in (0, 64], got ", *factor));
    }
    hidden = static_cast<int64_t>(*factor * static_cast<double>(hidden));
    hidden = *multiple * ((hidden + *multiple - 1) / *multiple);
  }
  if (hidden <= 0) return Refuse("intermediate_size", "leaves no feed-forward width");
  return hidden;
}

// The indices of the attention layers: layer_types, else full_attn_idxs,
// else every layer (transformers' default).
absl::StatusOr<std::vector<int64_t>> AttentionLayers(const Json& c, int64_t layers) {
  std::vector<int64_t> attention;
  if (auto types = c.find("layer_types"); types != c.end() && !types->is_null()) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != layers) {
      return Refuse("layer_types", absl::StrCat("must list ", layers, " layer types"));
    }
    for (int64_t l = 0; l < layers; ++l) {
      const Json& type = (*types)[l];
      if (type == "full_attention") {
        attention.push_back(l);
      } else if (type != "conv") {
        return Refuse("layer_types", absl::StrCat(type.dump(), " at ", l,
                                                  " is not \"conv\" or \"full_attention\""));
      }
    }
    return attention;
  }
  if (auto idxs = c.find("full_attn_idxs"); idxs != c.end() && !idxs->is_null()) {
    if (!idxs->is_array()) return Refuse("full_attn_idxs", "must be an array of layer indices");
    for (const Json& i : *idxs) {
      if (!i.is_number_integer() || i.get<int64_t>() < 0 || i.get<int64_t>() >= layers) {
        return Refuse("full_attn_idxs", absl::StrCat(i.dump(), " is not a layer index"));
      }
      attention.push_back(i.get<int64_t>());
    }
    std::sort(attention.begin(), attention.end());
    attention.erase(std::unique(attention.begin(), attention.end()), attention.end());
    return attention;
  }
  for (int64_t l = 0; l < layers; ++l) attention.push_back(l);
  return attention;
}

absl::StatusOr<double> RopeTheta(const Json& c) {
  if (auto scaling = c.find("rope_scaling"); scaling != c.end() && !scaling->is_null()) {
    return Refuse("rope_scaling", "scaled rotary positions are not supported");
  }
  if (auto p = c.find("rope_parameters"); p != c.end() && !p->is_null()) {
    if (!p->is_object()) return Refuse("rope_parameters", "must be an object");
    for (const auto& item : p->items()) {
      if (item.key() == "rope_type" && item.value() == "default") continue;
      if (item.key() != "rope_theta") {
        return Refuse(absl::StrCat("rope_parameters.", item.key()), "is not supported");
      }
    }
    if (p->contains("rope_theta")) return Number(*p, "rope_theta", 1e6);
  }
  return Number(c, c.contains("rope_theta") ? "rope_theta" : "theta", 1e6);
}

absl::StatusOr<bool> Tied(const Json& c) {
  for (const char* key : {"tie_word_embeddings", "tie_embedding"}) {
    auto it = c.find(key);
    if (it == c.end() || it->is_null()) continue;
    if (!it->is_boolean()) return Refuse(key, "must be true or false");
    return it->get<bool>();
  }
  return true;
}

// Keys that repeat a size or choose what the blocks always do.
absl::Status Consistent(const Json& c, const LmConfig& config) {
  const int64_t d = config.d_model;
  for (auto [key, value, why] :
       {std::tuple<const char*, Json, const char*>{"conv_dim", d, "must equal hidden_size"},
        {"conv_dim_out", d, "must equal hidden_size"},
        {"block_dim", d, "must equal hidden_size"},
        {"num_heads", config.heads, "must equal num_attention_heads"},
        {"head_dim", d / config.heads, "must be hidden_size / num_attention_heads"},
        {"block_norm_eps", config.norm_eps, "must equal norm_eps"},
        {"conv_bias", false, "convolution biases are not built"},
        {"block_use_swiglu", true, "only the SwiGLU feed-forward is built"},
        {"use_pos_enc", true, "attention layers always use rotary positions"}}) {
    if (absl::Status s = Agrees(c, key, value, why); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<LmConfig> ConfigOf(const Json& c) {
  for (const auto& item : c.items()) {
    if (!ReadKeys().count(item.key()) && !IgnoredKeys().count(item.key())) {
      return Refuse(item.key(), "is not an LFM2 option this server implements");
    }
  }
  LmConfig config;
  config.mixer = MixerKind::kShortConv;
  config.norm = NormKind::kRmsNorm;
  config.ff = FeedForwardKind::kSwiGlu;
  config.qk_norm = true;
  for (auto [key, field] : {std::pair<const char*, int64_t*>{"hidden_size", &config.d_model},
                            {"num_hidden_layers", &config.layers},
                            {"num_attention_heads", &config.heads}}) {
    absl::StatusOr<int64_t> value = Int(c, key);
    if (!value.ok()) return value.status();
    *field = *value;
  }
  absl::StatusOr<int64_t> kv = Int(c, "num_key_value_heads", config.heads);
  absl::StatusOr<int64_t> width = Int(c, "conv_L_cache", 3);
  absl::StatusOr<int64_t> context = Int(c, "max_position_embeddings", 128000);
  absl::StatusOr<int64_t> ff = FeedForwardWidth(c);
  absl::StatusOr<double> eps = Number(c, "norm_eps", 1e-5);
  absl::StatusOr<double> theta = RopeTheta(c);
  absl::StatusOr<bool> tied = Tied(c);
  absl::StatusOr<std::vector<int64_t>> attention = AttentionLayers(c, config.layers);
  for (const absl::Status& s : {kv.status(), width.status(), context.status(), ff.status(),
                                eps.status(), theta.status(), tied.status(), attention.status()}) {
    if (!s.ok()) return s;
  }
  if (config.d_model % config.heads != 0) {
    return Refuse("num_attention_heads", "must divide hidden_size");
  }
  config.kv_heads = *kv;
  config.conv_kernel = *width;
  config.max_context = std::min(*context, kLfm2MaxContext);
  config.ff_hidden = *ff;
  config.norm_eps = *eps;
  config.rope_theta = *theta;
  config.tie_embeddings = *tied;
  config.attention_layers = *attention;
  if (static_cast<int64_t>(config.attention_layers.size()) == config.layers) {
    config.mixer = MixerKind::kGqa;  // attention only: a plain transformer
    config.attention_layers.clear();
  }
  if (absl::Status s = Consistent(c, config); !s.ok()) return s;
  return config;
}

// q_proj, k_proj and v_proj of each attention layer as the one qkv_proj
// the gqa mixer holds, under a name of their own; errors name the tensor.
absl::Status FuseAttentionProjections(const LmConfig& config, TensorMap& tensors) {
  const int64_t head = config.d_model / config.heads;
  const int64_t kv = (config.kv_heads > 0 ? config.kv_heads : config.heads) * head;
  for (int64_t l = 0; l < config.layers; ++l) {
    if (config.layer_mixer(l) != MixerKind::kGqa) continue;
    const std::string at = absl::StrCat("model.layers.", l, ".self_attn.");
    std::vector<torch::Tensor> parts;
    for (auto [name, rows] : {std::pair<const char*, int64_t>{"q_proj", config.d_model},
                              {"k_proj", kv},
                              {"v_proj", kv}}) {
      const std::string key = absl::StrCat(at, name, ".weight");
      const torch::Tensor* t = FindTensor(tensors, key);
      if (t == nullptr) return absl::InvalidArgumentError("missing tensor " + key);
      if (t->dim() != 2 || t->size(0) != rows || t->size(1) != config.d_model) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", key, " has shape ", ShapeText(*t),
                                                       "; expected [", rows, ", ", config.d_model,
                                                       "]"));
      }
      parts.push_back(*t);
      tensors.erase(key);
    }
    tensors[at + "qkv_proj.weight"] = torch::cat(parts, 0);
  }
  return absl::OkStatus();
}

Mapping Lfm2Mapping(const LmConfig& config) {
  Mapping m;
  m.model_name = "an LFM2 model";
  for (int64_t l = 0; l < config.layers; ++l) {
    const std::string ours = absl::StrCat("layers.", l, ".");
    const std::string theirs = absl::StrCat("model.layers.", l, ".");
    std::vector<std::pair<std::string, std::string>> names = {
        {"mix_norm.gain", "operator_norm.weight"},
        {"ff_norm.gain", "ffn_norm.weight"},
        {"ff.gate.weight", "feed_forward.w1.weight"},
        {"ff.up.weight", "feed_forward.w3.weight"},
        {"ff.down.weight", "feed_forward.w2.weight"}};
    if (config.layer_mixer(l) == MixerKind::kGqa) {
      names.insert(names.end(), {{"mixer.qkv_proj.weight", "self_attn.qkv_proj.weight"},
                                 {"mixer.out_proj.weight", "self_attn.out_proj.weight"},
                                 {"mixer.q_norm.gain", "self_attn.q_layernorm.weight"},
                                 {"mixer.k_norm.gain", "self_attn.k_layernorm.weight"}});
    } else {
      names.insert(names.end(), {{"mixer.in_proj.weight", "conv.in_proj.weight"},
                                 {"mixer.conv_weight", "conv.conv.weight"},
                                 {"mixer.out_proj.weight", "conv.out_proj.weight"}});
    }
    for (const auto& [mine, name] : names) m.sources[ours + mine] = {theirs + name};
  }
  m.sources["embedding.weight"] = {"model.embed_tokens.weight"};
  m.sources["final_norm.gain"] = {"model.embedding_norm.weight"};
  if (!config.tie_embeddings) m.sources["head_weight"] = {"lm_head.weight"};
  return m;
}

}  // namespace

absl::StatusOr<LmConfig> ParseLfm2Config(const std::string& config_json) {
  const Json json = Json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError("config.json: not a JSON object");
  }
  return ConfigOf(json);
}

absl::StatusOr<CausalLm> ImportLfm2(const std::string& config_json, const TensorMap& tensors,
                                    std::string* layout) {
  absl::StatusOr<LmConfig> config = ParseLfm2Config(config_json);
  if (!config.ok()) return config.status();
  const Json json = Json::parse(config_json);
  const std::string embedding = "model.embed_tokens.weight";
  absl::StatusOr<int64_t> vocab = TensorSize(tensors, embedding, 2, 0);
  if (!vocab.ok()) return vocab.status();
  if (absl::StatusOr<int64_t> said = Int(json, "vocab_size", *vocab);
      !said.ok() || *said != *vocab) {
    return Refuse("vocab_size", absl::StrCat("says ", json.value("vocab_size", Json()).dump(),
                                             "; tensor ", embedding, " has ", *vocab, " rows"));
  }
  config->vocab_size = *vocab;
  if (absl::Status valid = config->Validate(); !valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json describes no valid model: ", valid.message()));
  }
  TensorMap fused = tensors;
  if (absl::Status s = FuseAttentionProjections(*config, fused); !s.ok()) return s;
  Mapping mapping = Lfm2Mapping(*config);
  if (config->tie_embeddings) {
    if (const torch::Tensor* stored = FindTensor(fused, "lm_head.weight")) {
      const torch::Tensor& table = fused.at(embedding);
      if (stored->sizes() != table.sizes() || !torch::equal(*stored, table)) {
        return absl::InvalidArgumentError(absl::StrCat("tensor lm_head.weight differs from ",
                                                       embedding, ", but config.json ties them"));
      }
      mapping.may_skip.insert("lm_head.weight");
    }
  }
  *layout = "transformers-lfm2";
  return BuildModel(*config, mapping, fused);
}

}  // namespace attn
