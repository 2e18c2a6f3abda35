#include "model/checkpoints/granite_checkpoint.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/checkpoints/config_fields.h"

namespace attn {
namespace {

using Json = nlohmann::json;

// Keys of Granite's configs that change nothing at inference: training,
// initialisation, token ids, versions. Every other key is read or checked.
const std::set<std::string>& IgnoredKeys() {
  static const auto* keys = new std::set<std::string>{
      "architectures",        "model_type",           "torch_dtype",       "dtype",
      "transformers_version", "_name_or_path",        "initializer_range", "use_cache",
      "bos_token_id",         "pad_token_id",         "eos_token_id",      "attention_dropout",
      "output_router_logits", "router_aux_loss_coef", "mamba_chunk_size",  "time_step_min",
      "time_step_max",        "time_step_floor",
  };
  return *keys;
}

const std::set<std::string>& ReadKeys() {
  static const auto* keys = new std::set<std::string>{"vocab_size",
                                                      "hidden_size",
                                                      "num_hidden_layers",
                                                      "num_attention_heads",
                                                      "num_key_value_heads",
                                                      "shared_intermediate_size",
                                                      "num_local_experts",
                                                      "num_experts_per_tok",
                                                      "intermediate_size",
                                                      "hidden_act",
                                                      "rms_norm_eps",
                                                      "normalization_function",
                                                      "max_position_embeddings",
                                                      "tie_word_embeddings",
                                                      "position_embedding_type",
                                                      "rope_theta",
                                                      "rope_scaling",
                                                      "rope_parameters",
                                                      "attention_bias",
                                                      "embedding_multiplier",
                                                      "residual_multiplier",
                                                      "attention_multiplier",
                                                      "logits_scaling",
                                                      "layer_types",
                                                      "layers_block_type",
                                                      "mamba_n_heads",
                                                      "mamba_n_groups",
                                                      "mamba_d_state",
                                                      "mamba_d_head",
                                                      "mamba_d_conv",
                                                      "mamba_expand",
                                                      "mamba_conv_bias",
                                                      "mamba_proj_bias",
                                                      "time_step_limit"};
  return *keys;
}

// Granite's four scalars (granite_checkpoint.h says where each goes).
struct Multipliers {
  double embedding = 1.0;
  double residual = 1.0;
  double attention = 1.0;
  double logits = 1.0;
};

absl::StatusOr<Multipliers> MultipliersOf(const Json& c) {
  Multipliers m;
  for (auto [key, field] : {std::pair<const char*, double*>{"embedding_multiplier", &m.embedding},
                            {"residual_multiplier", &m.residual},
                            {"attention_multiplier", &m.attention},
                            {"logits_scaling", &m.logits}}) {
    absl::StatusOr<double> value = NumberAt(c, key, 1.0);
    if (!value.ok()) return value.status();
    if (!(*value > 0 && *value < 1e6)) {
      return RefuseKey(key, absl::StrCat("must be in (0, 1e6), got ", *value));
    }
    *field = *value;
  }
  return m;
}

// The indices of the attention layers: layer_types (or its older name
// layers_block_type), else none (transformers' default: every layer mamba).
absl::StatusOr<std::vector<int64_t>> AttentionLayers(const Json& c, int64_t layers) {
  const char* key = c.contains("layer_types") ? "layer_types" : "layers_block_type";
  std::vector<int64_t> attention;
  auto types = c.find(key);
  if (types == c.end() || types->is_null()) return attention;
  if (!types->is_array() || static_cast<int64_t>(types->size()) != layers) {
    return RefuseKey(key, absl::StrCat("must list ", layers, " layer types"));
  }
  for (int64_t l = 0; l < layers; ++l) {
    const Json& type = (*types)[l];
    if (type == "attention") {
      attention.push_back(l);
    } else if (type != "mamba") {
      return RefuseKey(key,
                       absl::StrCat(type.dump(), " at ", l, " is not \"mamba\" or \"attention\""));
    }
  }
  return attention;
}

// Whether the attention layers rotate queries and keys, and the base.
absl::Status Positions(const Json& c, LmConfig& config) {
  auto type = c.find("position_embedding_type");
  config.rope = type != c.end() && *type == "rope";
  if (type != c.end() && !type->is_null() && *type != "rope" && *type != "nope") {
    return RefuseKey("position_embedding_type",
                     absl::StrCat(type->dump(), " is not null, \"nope\" or \"rope\""));
  }
  absl::StatusOr<double> theta = RopeThetaAt(c, "rope_theta", 10000.0);
  if (!theta.ok()) return theta.status();
  config.rope_theta = *theta;
  return absl::OkStatus();
}

// Keys that choose what the blocks always do.
absl::Status Consistent(const Json& c) {
  for (auto [key, value, why] :
       {std::tuple<const char*, Json, const char*>{"hidden_act", "silu", "only silu is built"},
        {"normalization_function", "rmsnorm", "only RMSNorm is built"},
        {"attention_bias", false, "projection biases are not built"},
        {"mamba_proj_bias", false, "projection biases are not built"},
        {"mamba_n_groups", 1,
         "Granite normalises the gated output over all groups, the mamba2 blocks over each"}}) {
    if (absl::Status s = KeyAgrees(c, key, value, why); !s.ok()) return s;
  }
  if (absl::Status s = NoTimeStepLimit(c, "time_step_limit"); !s.ok()) return s;
  return absl::OkStatus();
}

// The Mamba-2 sizes; mamba_d_head may be "auto" (expand * hidden / heads).
absl::Status Mamba2SizesOf(const Json& c, LmConfig& config) {
  absl::StatusOr<int64_t> heads = PositiveIntAt(c, "mamba_n_heads", 128),
                          state = PositiveIntAt(c, "mamba_d_state", 256),
                          conv = PositiveIntAt(c, "mamba_d_conv", 4),
                          expand = PositiveIntAt(c, "mamba_expand", 2);
  for (const auto* v : {&heads, &state, &conv, &expand}) {
    if (!v->ok()) return v->status();
  }
  if (*expand > 64) return RefuseKey("mamba_expand", "must be at most 64");
  config.heads = *heads;
  config.mamba2 = {*state, *conv, *expand, 1};
  const int64_t inner = *expand * config.d_model;
  if (inner % *heads != 0)
    return RefuseKey("mamba_n_heads", "must divide mamba_expand * hidden_size");
  if (auto head = c.find("mamba_d_head"); head != c.end() && !head->is_null() && *head != "auto") {
    if (!head->is_number_integer() || head->get<int64_t>() * *heads != inner) {
      return RefuseKey("mamba_d_head", absl::StrCat(head->dump(), " times mamba_n_heads must be ",
                                                    inner, " (mamba_expand * hidden_size)"));
    }
  }
  return absl::OkStatus();
}

// num_local_experts experts of width intermediate_size, num_experts_per_tok
// of them per token (Granite 4.0-H Tiny and Small); none for the dense ones.
absl::Status ExpertsOf(const Json& c, LmConfig& config) {
  auto experts = c.find("num_local_experts");
  if (experts == c.end() || experts->is_null() || *experts == 0) return absl::OkStatus();
  absl::StatusOr<int64_t> count = PositiveIntAt(c, "num_local_experts");
  absl::StatusOr<int64_t> top_k = PositiveIntAt(c, "num_experts_per_tok");
  absl::StatusOr<int64_t> hidden = PositiveIntAt(c, "intermediate_size");
  for (const auto* v : {&count, &top_k, &hidden}) {
    if (!v->ok()) return v->status();
  }
  if (*count > 4096) return RefuseKey("num_local_experts", "must be at most 4096");
  if (*top_k > *count) return RefuseKey("num_experts_per_tok", "exceeds num_local_experts");
  config.moe = {*count, *top_k, *hidden};
  return absl::OkStatus();
}

absl::StatusOr<LmConfig> ConfigOf(const Json& c) {
  if (absl::Status s = OnlyKnownKeys(c, ReadKeys(), IgnoredKeys(), "a Granite 4.0-H"); !s.ok()) {
    return s;
  }
  if (absl::Status s = Consistent(c); !s.ok()) return s;
  LmConfig config;
  config.mixer = MixerKind::kMamba2;
  config.norm = NormKind::kRmsNorm;
  config.ff = FeedForwardKind::kSwiGlu;
  config.whole_block_ff = true;
  if (absl::Status s = ReadPositiveInts(c, {{"hidden_size", &config.d_model},
                                            {"num_hidden_layers", &config.layers},
                                            {"num_attention_heads", &config.attention_heads},
                                            {"shared_intermediate_size", &config.ff_hidden}});
      !s.ok()) {
    return s;
  }
  absl::StatusOr<int64_t> kv = PositiveIntAt(c, "num_key_value_heads", config.attention_heads);
  absl::StatusOr<int64_t> context = PositiveIntAt(c, "max_position_embeddings", 2048);
  absl::StatusOr<double> eps = NumberAt(c, "rms_norm_eps", 1e-6);
  absl::StatusOr<bool> tied = BoolAt(c, "tie_word_embeddings", false);
  absl::StatusOr<std::vector<int64_t>> attention = AttentionLayers(c, config.layers);
  for (const absl::Status& s :
       {kv.status(), context.status(), eps.status(), tied.status(), attention.status(),
        Positions(c, config), Mamba2SizesOf(c, config)}) {
    if (!s.ok()) return s;
  }
  if (config.d_model % config.attention_heads != 0) {
    return RefuseKey("num_attention_heads", "must divide hidden_size");
  }
  config.kv_heads = *kv;
  config.max_context = std::min(*context, kGraniteMaxContext);
  config.norm_eps = *eps;
  config.tie_embeddings = *tied;
  config.attention_layers = *attention;
  if (absl::Status s = ExpertsOf(c, config); !s.ok()) return s;
  return config;
}

Mapping GraniteMapping(const LmConfig& config, const Multipliers& m) {
  Mapping map;
  map.model_name = "a Granite 4.0-H model";
  for (int64_t l = 0; l < config.layers; ++l) {
    const std::string ours = absl::StrCat("layers.", l, ".");
    const std::string theirs = absl::StrCat("model.layers.", l, ".");
    const bool mamba = config.layer_mixer(l) == MixerKind::kMamba2;
    std::vector<std::pair<std::string, Source>> names = {
        {"ff_norm.gain", {"post_attention_layernorm.weight"}},
        {"ff.gate.weight", {"shared_mlp.gate.weight"}},
        {"ff.up.weight", {"shared_mlp.up.weight"}},
        {"ff.down.weight", {"shared_mlp.output_linear.weight", Transform::kSame, m.residual}}};
    if (mamba) {
      names.insert(names.end(), {{"mixer.norm.gain", {"input_layernorm.weight"}},
                                 {"mixer.in_proj.weight", {"mamba.in_proj.weight"}},
                                 {"mixer.conv_weight", {"mamba.conv1d.weight"}},
                                 {"mixer.conv_bias", {"mamba.conv1d.bias"}},
                                 {"mixer.dt_bias", {"mamba.dt_bias"}},
                                 {"mixer.a_log", {"mamba.A_log"}},
                                 {"mixer.skip", {"mamba.D"}},
                                 {"mixer.out_norm_weight", {"mamba.norm.weight"}},
                                 {"mixer.out_proj.weight",
                                  {"mamba.out_proj.weight", Transform::kSame, m.residual}}});
    } else {
      names.insert(names.end(), {{"mix_norm.gain", {"input_layernorm.weight"}},
                                 {"mixer.qkv_proj.weight", {"self_attn.qkv_proj.weight"}},
                                 {"mixer.out_proj.weight",
                                  {"self_attn.o_proj.weight", Transform::kSame, m.residual}}});
    }
    if (config.moe.experts > 0) {
      names.push_back({"moe.router.weight", {"block_sparse_moe.router.layer.weight"}});
      for (int64_t e = 0; e < config.moe.experts; ++e) {
        const std::string ours_e = absl::StrCat("moe.experts.", e, ".");
        const std::string theirs_e = absl::StrCat("block_sparse_moe.experts.", e, ".");
        names.push_back({ours_e + "gate.weight", {theirs_e + "gate.weight"}});
        names.push_back({ours_e + "up.weight", {theirs_e + "up.weight"}});
        names.push_back(
            {ours_e + "down.weight", {theirs_e + "down.weight", Transform::kSame, m.residual}});
      }
    }
    for (auto& [mine, source] : names) {
      source.name = theirs + source.name;
      map.sources[ours + mine] = source;
    }
  }
  const double head = config.tie_embeddings ? m.embedding * m.logits : m.logits;
  map.sources["embedding.weight"] = {"model.embed_tokens.weight", Transform::kSame, m.embedding};
  map.sources["final_norm.gain"] = {"model.norm.weight", Transform::kSame, 1.0 / head};
  if (!config.tie_embeddings) map.sources["head_weight"] = {"lm_head.weight"};
  return map;
}

// input_linear [2 I, d] is the gate's rows and then the up projection's:
// two tensors of their own, under names of their own.
absl::Status SplitSharedMlp(const LmConfig& config, TensorMap& tensors) {
  for (int64_t l = 0; l < config.layers; ++l) {
    const std::string at = absl::StrCat("model.layers.", l, ".shared_mlp.");
    const std::string key = at + "input_linear.weight";
    const torch::Tensor* t = FindTensor(tensors, key);
    if (t == nullptr) return absl::InvalidArgumentError("missing tensor " + key);
    if (t->dim() != 2 || t->size(0) != 2 * config.ff_hidden || t->size(1) != config.d_model) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", key, " has shape ", ShapeText(*t),
                                                     "; expected [", 2 * config.ff_hidden, ", ",
                                                     config.d_model, "]"));
    }
    const torch::Tensor whole = *t;
    tensors.erase(key);
    tensors[at + "gate.weight"] = whole.narrow(0, 0, config.ff_hidden);
    tensors[at + "up.weight"] = whole.narrow(0, config.ff_hidden, config.ff_hidden);
  }
  return absl::OkStatus();
}

// block_sparse_moe's stacked experts, input_linear [E, 2 I, d] and
// output_linear [E, d, I], as each expert's gate, up and down matrices.
absl::Status SplitExperts(const LmConfig& config, TensorMap& tensors) {
  const int64_t experts = config.moe.experts, width = config.moe.hidden, d = config.d_model;
  for (int64_t l = 0; l < config.layers && experts > 0; ++l) {
    const std::string at = absl::StrCat("model.layers.", l, ".block_sparse_moe.");
    std::vector<torch::Tensor> stacked;
    for (auto [name, rows, cols] :
         {std::tuple<const char*, int64_t, int64_t>{"input_linear.weight", 2 * width, d},
          {"output_linear.weight", d, width}}) {
      const std::string key = at + name;
      const torch::Tensor* t = FindTensor(tensors, key);
      if (t == nullptr) return absl::InvalidArgumentError("missing tensor " + key);
      if (t->dim() != 3 || t->size(0) != experts || t->size(1) != rows || t->size(2) != cols) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", key, " has shape ", ShapeText(*t),
                                                       "; expected [", experts, ", ", rows, ", ",
                                                       cols, "]"));
      }
      stacked.push_back(*t);
      tensors.erase(key);
    }
    for (int64_t e = 0; e < experts; ++e) {
      const std::string expert = absl::StrCat(at, "experts.", e, ".");
      tensors[expert + "gate.weight"] = stacked[0][e].narrow(0, 0, width);
      tensors[expert + "up.weight"] = stacked[0][e].narrow(0, width, width);
      tensors[expert + "down.weight"] = stacked[1][e];
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LmConfig> ParseGraniteConfig(const std::string& config_json) {
  absl::StatusOr<Json> json = ParseConfigObject(config_json);
  if (!json.ok()) return json.status();
  return ConfigOf(*json);
}

absl::StatusOr<CausalLm> ImportGranite(const std::string& config_json, const TensorMap& tensors,
                                       std::string* layout) {
  absl::StatusOr<Json> json = ParseConfigObject(config_json);
  if (!json.ok()) return json.status();
  absl::StatusOr<LmConfig> config = ConfigOf(*json);
  absl::StatusOr<Multipliers> multipliers = MultipliersOf(*json);
  if (!config.ok()) return config.status();
  if (!multipliers.ok()) return multipliers.status();
  absl::StatusOr<bool> conv_bias = BoolAt(*json, "mamba_conv_bias", true);
  if (!conv_bias.ok()) return conv_bias.status();
  const std::string embedding = "model.embed_tokens.weight";
  if (absl::Status s = SetVocabulary(*json, tensors, embedding, &*config); !s.ok()) return s;
  TensorMap split = tensors;
  const double query_scale = multipliers->attention *
                             std::sqrt(static_cast<double>(config->d_model / config->gqa_heads()));
  if (absl::Status s = FuseQkvProjections(*config, query_scale, split); !s.ok()) return s;
  if (absl::Status s = SplitSharedMlp(*config, split); !s.ok()) return s;
  if (absl::Status s = SplitExperts(*config, split); !s.ok()) return s;
  Mapping mapping = GraniteMapping(*config, *multipliers);
  if (!*conv_bias) {
    mapping.preset = [](const std::string& name, torch::Tensor& value) {
      if (!absl::EndsWith(name, ".conv_bias")) return false;
      value.zero_();
      return true;
    };
  }
  if (config->tie_embeddings) {
    if (absl::Status s = AllowTiedHeadCopy(split, embedding, &mapping); !s.ok()) return s;
  }
  *layout = "transformers-granitemoehybrid";
  return BuildModel(*config, mapping, split);
}

}  // namespace attn
