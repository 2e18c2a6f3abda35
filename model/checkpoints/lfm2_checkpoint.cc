#include "model/checkpoints/lfm2_checkpoint.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "model/checkpoints/config_fields.h"

namespace attn {
namespace {

using Json = nlohmann::json;

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

// transformers' Lfm2MLP width.
absl::StatusOr<int64_t> FeedForwardWidth(const Json& c) {
  absl::StatusOr<int64_t> width = c.contains("block_ff_dim")
                                      ? PositiveIntAt(c, "block_ff_dim")
                                      : PositiveIntAt(c, "intermediate_size");
  absl::StatusOr<int64_t> multiple = PositiveIntAt(c, "block_multiple_of", 256);
  if (!width.ok()) return width.status();
  if (!multiple.ok()) return multiple.status();
  auto adjust = c.find("block_auto_adjust_ff_dim");
  if (adjust != c.end() && !adjust->is_null() && !adjust->is_boolean()) {
    return RefuseKey("block_auto_adjust_ff_dim", "must be true or false");
  }
  if (adjust != c.end() && *adjust == false) return *width;
  int64_t hidden = 2 * *width / 3;
  // transformers scales and rounds only with a multiplier (its default is
  // 1.0; an explicit null has none).
  auto multiplier = c.find("block_ffn_dim_multiplier");
  if (multiplier == c.end() || !multiplier->is_null()) {
    absl::StatusOr<double> factor = NumberAt(c, "block_ffn_dim_multiplier", 1.0);
    if (!factor.ok()) return factor.status();
    if (!(*factor > 0 && *factor <= 64)) {
      return RefuseKey("block_ffn_dim_multiplier",
                       absl::StrCat("must be in (0, 64], got ", *factor));
    }
    hidden = static_cast<int64_t>(*factor * static_cast<double>(hidden));
    hidden = *multiple * ((hidden + *multiple - 1) / *multiple);
  }
  if (hidden <= 0) return RefuseKey("intermediate_size", "leaves no feed-forward width");
  return hidden;
}

// The indices of the attention layers: layer_types, else full_attn_idxs,
// else every layer (transformers' default).
absl::StatusOr<std::vector<int64_t>> AttentionLayers(const Json& c, int64_t layers) {
  std::vector<int64_t> attention;
  if (auto types = c.find("layer_types"); types != c.end() && !types->is_null()) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != layers) {
      return RefuseKey("layer_types", absl::StrCat("must list ", layers, " layer types"));
    }
    for (int64_t l = 0; l < layers; ++l) {
      const Json& type = (*types)[l];
      if (type == "full_attention") {
        attention.push_back(l);
      } else if (type != "conv") {
        return RefuseKey("layer_types", absl::StrCat(type.dump(), " at ", l,
                                                     " is not \"conv\" or \"full_attention\""));
      }
    }
    return attention;
  }
  if (auto idxs = c.find("full_attn_idxs"); idxs != c.end() && !idxs->is_null()) {
    if (!idxs->is_array()) return RefuseKey("full_attn_idxs", "must be an array of layer indices");
    for (const Json& i : *idxs) {
      if (!i.is_number_integer() || i.get<int64_t>() < 0 || i.get<int64_t>() >= layers) {
        return RefuseKey("full_attn_idxs", absl::StrCat(i.dump(), " is not a layer index"));
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

absl::StatusOr<bool> Tied(const Json& c) {
  const char* key = c.contains("tie_word_embeddings") ? "tie_word_embeddings" : "tie_embedding";
  return BoolAt(c, key, true);
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
    if (absl::Status s = KeyAgrees(c, key, value, why); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<LmConfig> ConfigOf(const Json& c) {
  if (absl::Status s = OnlyKnownKeys(c, ReadKeys(), IgnoredKeys(), "an LFM2"); !s.ok()) return s;
  LmConfig config;
  config.mixer = MixerKind::kShortConv;
  config.norm = NormKind::kRmsNorm;
  config.ff = FeedForwardKind::kSwiGlu;
  config.qk_norm = true;
  if (absl::Status s = ReadPositiveInts(c, {{"hidden_size", &config.d_model},
                                            {"num_hidden_layers", &config.layers},
                                            {"num_attention_heads", &config.heads}});
      !s.ok()) {
    return s;
  }
  absl::StatusOr<int64_t> kv = PositiveIntAt(c, "num_key_value_heads", config.heads);
  absl::StatusOr<int64_t> width = PositiveIntAt(c, "conv_L_cache", 3);
  absl::StatusOr<int64_t> context = PositiveIntAt(c, "max_position_embeddings", 128000);
  absl::StatusOr<int64_t> ff = FeedForwardWidth(c);
  absl::StatusOr<double> eps = NumberAt(c, "norm_eps", 1e-5);
  absl::StatusOr<double> theta =
      RopeThetaAt(c, c.contains("rope_theta") ? "rope_theta" : "theta", 1e6);
  absl::StatusOr<bool> tied = Tied(c);
  absl::StatusOr<std::vector<int64_t>> attention = AttentionLayers(c, config.layers);
  for (const absl::Status& s : {kv.status(), width.status(), context.status(), ff.status(),
                                eps.status(), theta.status(), tied.status(), attention.status()}) {
    if (!s.ok()) return s;
  }
  if (config.d_model % config.heads != 0) {
    return RefuseKey("num_attention_heads", "must divide hidden_size");
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
  absl::StatusOr<Json> json = ParseConfigObject(config_json);
  if (!json.ok()) return json.status();
  return ConfigOf(*json);
}

absl::StatusOr<CausalLm> ImportLfm2(const std::string& config_json, const TensorMap& tensors,
                                    std::string* layout) {
  absl::StatusOr<Json> json = ParseConfigObject(config_json);
  if (!json.ok()) return json.status();
  absl::StatusOr<LmConfig> config = ConfigOf(*json);
  if (!config.ok()) return config.status();
  const std::string embedding = "model.embed_tokens.weight";
  if (absl::Status s = SetVocabulary(*json, tensors, embedding, &*config); !s.ok()) return s;
  TensorMap fused = tensors;
  if (absl::Status s = FuseQkvProjections(*config, 1.0, fused); !s.ok()) return s;
  Mapping mapping = Lfm2Mapping(*config);
  if (config->tie_embeddings) {
    if (absl::Status s = AllowTiedHeadCopy(fused, embedding, &mapping); !s.ok()) return s;
  }
  *layout = "transformers-lfm2";
  return BuildModel(*config, mapping, fused);
}

}  // namespace attn
