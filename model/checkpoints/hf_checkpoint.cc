#include "model/checkpoints/hf_checkpoint.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "model/checkpoints/config_fields.h"

namespace attn {
namespace {

using Json = nlohmann::json;

// Refuses `key` unless absent, null or equal to `supported`.
absl::Status Only(const Json& object, const char* key, const Json& supported) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null() || *it == supported) return absl::OkStatus();
  return RefuseKey(key,
                   absl::StrCat(it->dump(), " is not supported (only ", supported.dump(), ")"));
}

absl::Status EpsIs1e5(const Json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return absl::OkStatus();
  absl::StatusOr<double> eps = PythonNumber(*it, key);
  if (!eps.ok()) return eps.status();
  if (std::abs(*eps - 1e-5) > 1e-12)
    return RefuseKey(key, absl::StrCat(*eps, " (only 1e-5 is supported)"));
  return absl::OkStatus();
}

// Sets the Mamba-2 fields of `c` from its sizes.
void SetMamba2(LmConfig& c, int64_t d, int64_t layers, int64_t heads, int64_t expand,
               const Mamba2Sizes& sizes) {
  c.mixer = MixerKind::kMamba2;
  c.norm = WholeBlockNorm(c.mixer);
  c.d_model = d;
  c.layers = layers;
  c.heads = heads;
  c.ff_hidden = expand * d;  // unused by the block
  c.mamba2 = sizes;
}

absl::StatusOr<HfModelSpec> TransformersMamba2(const Json& j) {
  HfModelSpec spec;
  spec.layout = "transformers-mamba2";
  spec.prefix = "backbone.";
  spec.embedding = "backbone.embeddings.weight";
  // Defaults as transformers' Mamba2Config has them.
  absl::StatusOr<int64_t> d = PositiveIntAt(j, "hidden_size", 4096),
                          layers = PositiveIntAt(j, "num_hidden_layers", 64),
                          heads = PositiveIntAt(j, "num_heads", 128),
                          head_dim = PositiveIntAt(j, "head_dim", 64),
                          state = PositiveIntAt(j, "state_size", 128),
                          groups = PositiveIntAt(j, "n_groups", 8),
                          expand = PositiveIntAt(j, "expand", 2),
                          conv = PositiveIntAt(j, "conv_kernel", 4);
  for (const auto* v : {&d, &layers, &heads, &head_dim, &state, &groups, &expand, &conv}) {
    if (!v->ok()) return v->status();
  }
  absl::StatusOr<bool> tie = BoolAt(j, "tie_word_embeddings", false),
                       conv_bias = BoolAt(j, "use_conv_bias", true);
  if (!tie.ok()) return tie.status();
  if (!conv_bias.ok()) return conv_bias.status();
  for (const absl::Status& s :
       {Only(j, "hidden_act", "silu"), Only(j, "use_bias", false), Only(j, "rms_norm", true),
        Only(j, "norm_before_gate", false), EpsIs1e5(j, "layer_norm_epsilon"),
        NoTimeStepLimit(j, "time_step_limit")}) {
    if (!s.ok()) return s;
  }
  if (*heads * *head_dim != *expand * *d) {
    return RefuseKey("num_heads",
                     absl::StrCat(*heads, " heads of head_dim ", *head_dim,
                                  " are not expand * hidden_size (", *expand * *d, ") channels"));
  }
  SetMamba2(spec.config, *d, *layers, *heads, *expand, {*state, *conv, *expand, *groups});
  spec.config.tie_embeddings = *tie;
  spec.conv_bias = *conv_bias;
  return spec;
}

absl::StatusOr<HfModelSpec> MambaSsmMamba2(const Json& j) {
  HfModelSpec spec;
  spec.layout = "mamba_ssm-mamba2";
  spec.prefix = "backbone.";
  spec.embedding = "backbone.embedding.weight";
  absl::StatusOr<int64_t> d = PositiveIntAt(j, "d_model", 0),
                          layers = PositiveIntAt(j, "n_layer", 0);
  if (!d.ok()) return d.status();
  if (!layers.ok()) return layers.status();
  if (*d == 0 || *layers == 0) return RefuseKey("d_model", "d_model and n_layer are required");
  const Json& ssm = j.at("ssm_cfg");
  if (!ssm.is_object()) return RefuseKey("ssm_cfg", "must be an object");
  auto layer = ssm.find("layer");
  if (layer == ssm.end() || *layer != "Mamba2") {
    return RefuseKey("ssm_cfg.layer",
                     absl::StrCat(layer != ssm.end() ? layer->dump() : "Mamba1 (the default)",
                                  ": only Mamba2 is supported"));
  }
  if (auto it = j.find("d_intermediate"); it != j.end() && !(it->is_number() && *it == 0)) {
    return RefuseKey("d_intermediate", "an MLP after the mixer is not supported (only 0)");
  }
  if (auto it = j.find("attn_layer_idx"); it != j.end() && !(it->is_array() && it->empty())) {
    return RefuseKey("attn_layer_idx", "hybrid attention layers are not supported");
  }
  absl::StatusOr<int64_t> state = PositiveIntAt(ssm, "d_state", 128),
                          conv = PositiveIntAt(ssm, "d_conv", 4),
                          expand = PositiveIntAt(ssm, "expand", 2),
                          head_dim = PositiveIntAt(ssm, "headdim", 64),
                          groups = PositiveIntAt(ssm, "ngroups", 1);
  for (const auto* v : {&state, &conv, &expand, &head_dim, &groups}) {
    if (!v->ok()) return v->status();
  }
  absl::StatusOr<bool> tie = BoolAt(j, "tie_embeddings", true),
                       conv_bias = BoolAt(ssm, "conv_bias", true);
  if (!tie.ok()) return tie.status();
  if (!conv_bias.ok()) return conv_bias.status();
  for (const absl::Status& s :
       {Only(j, "rms_norm", true), Only(ssm, "D_has_hdim", false), Only(ssm, "rmsnorm", true),
        Only(ssm, "norm_before_gate", false), Only(ssm, "bias", false),
        Only(ssm, "learnable_init_states", false), NoTimeStepLimit(ssm, "dt_limit"),
        Only(ssm, "d_ssm", *expand * *d)}) {
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("ssm_cfg: ", s.message()));
  }
  if (auto it = ssm.find("activation"); it != ssm.end() && *it != "silu" && *it != "swish") {
    return RefuseKey("ssm_cfg.activation", absl::StrCat(it->dump(), " is not supported (silu)"));
  }
  if ((*expand * *d) % *head_dim != 0) {
    return RefuseKey(
        "ssm_cfg.headdim",
        absl::StrCat(*head_dim, " does not divide expand * d_model (", *expand * *d, ")"));
  }
  SetMamba2(spec.config, *d, *layers, *expand * *d / *head_dim, *expand,
            {*state, *conv, *expand, *groups});
  spec.config.tie_embeddings = *tie;
  spec.conv_bias = *conv_bias;
  return spec;
}

absl::StatusOr<HfModelSpec> TransformersRwkv4(const Json& j) {
  HfModelSpec spec;
  spec.layout = "transformers-rwkv4";
  spec.prefix = "rwkv.";
  spec.embedding = "rwkv.embeddings.weight";
  absl::StatusOr<int64_t> d = PositiveIntAt(j, "hidden_size", 4096),
                          layers = PositiveIntAt(j, "num_hidden_layers", 32);
  if (!d.ok()) return d.status();
  if (!layers.ok()) return layers.status();
  absl::StatusOr<int64_t> attention = PositiveIntAt(j, "attention_hidden_size", *d),
                          ff = PositiveIntAt(j, "intermediate_size", 4 * *d);
  if (!attention.ok()) return attention.status();
  if (!ff.ok()) return ff.status();
  if (*attention != *d) return RefuseKey("attention_hidden_size", "must equal hidden_size");
  if (auto s = EpsIs1e5(j, "layer_norm_epsilon"); !s.ok()) return s;
  int64_t rescale = 6;
  if (auto it = j.find("rescale_every"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return RefuseKey("rescale_every", "must be an integer at least 0");
    }
    rescale = it->get<int64_t>();
  }
  absl::StatusOr<bool> tie = BoolAt(j, "tie_word_embeddings", false);
  if (!tie.ok()) return tie.status();
  LmConfig& c = spec.config;
  c.mixer = MixerKind::kRwkv4;
  c.norm = WholeBlockNorm(c.mixer);
  c.d_model = *d;
  c.layers = *layers;
  c.heads = 1;
  c.ff_hidden = *ff;
  c.rescale_every = rescale;
  c.tie_embeddings = *tie;
  return spec;
}

// The sources of a Mamba-2 model's parameters.
Mapping Mamba2Mapping(const HfModelSpec& spec) {
  Mapping m;
  m.model_name = "a Mamba-2 model";
  for (int64_t l = 0; l < spec.config.layers; ++l) {
    const std::string ours = absl::StrCat("layers.", l, ".mixer.");
    const std::string theirs = absl::StrCat(spec.prefix, "layers.", l, ".");
    const std::pair<const char*, const char*> names[] = {
        {"norm.gain", "norm.weight"},
        {"in_proj.weight", "mixer.in_proj.weight"},
        {"conv_weight", "mixer.conv1d.weight"},
        {"conv_bias", "mixer.conv1d.bias"},
        {"dt_bias", "mixer.dt_bias"},
        {"a_log", "mixer.A_log"},
        {"skip", "mixer.D"},
        {"out_norm_weight", "mixer.norm.weight"},
        {"out_proj.weight", "mixer.out_proj.weight"}};
    for (const auto& [mine, name] : names) m.sources[ours + mine] = {theirs + name};
  }
  m.sources["embedding.weight"] = {spec.embedding};
  m.sources["final_norm.gain"] = {spec.prefix + "norm_f.weight"};
  if (!spec.config.tie_embeddings) m.sources["head_weight"] = {"lm_head.weight"};
  if (!spec.conv_bias) {
    m.preset = [](const std::string& name, torch::Tensor& value) {
      if (name.size() < 10 || name.compare(name.size() - 10, 10, ".conv_bias") != 0) return false;
      value.zero_();
      return true;
    };
  }
  return m;
}

Mapping Rwkv4Mapping(const HfModelSpec& spec) {
  Mapping m;
  m.model_name = "an RWKV-4 model";
  const int64_t every = spec.config.rescale_every;
  for (int64_t l = 0; l < spec.config.layers; ++l) {
    const std::string ours = absl::StrCat("layers.", l, ".mixer.");
    const std::string block = absl::StrCat(spec.prefix, "blocks.", l, ".");
    const std::string att = block + "attention.", ffn = block + "feed_forward.";
    const double scale = every > 0 ? std::ldexp(1.0, -static_cast<int>(l / every)) : 1.0;
    std::vector<std::pair<std::string, std::string>> norms = {{"ln1", "ln1"}, {"ln2", "ln2"}};
    if (l == 0) norms.push_back({"ln0", "pre_ln"});
    for (const auto& [mine, name] : norms) {
      m.sources[ours + mine + ".gain"] = {block + name + ".weight"};
      m.sources[ours + mine + ".bias"] = {block + name + ".bias"};
    }
    const std::pair<const char*, std::string> vectors[] = {
        {"mix_k", att + "time_mix_key"},           {"mix_v", att + "time_mix_value"},
        {"mix_r", att + "time_mix_receptance"},    {"time_decay", att + "time_decay"},
        {"time_first", att + "time_first"},        {"ffn_mix_k", ffn + "time_mix_key"},
        {"ffn_mix_r", ffn + "time_mix_receptance"}};
    for (const auto& [mine, name] : vectors) m.sources[ours + mine] = {name, Transform::kVector};
    for (const char* p : {"key", "value", "receptance"}) {
      m.sources[absl::StrCat(ours, p, ".weight")] = {absl::StrCat(att, p, ".weight")};
    }
    m.sources[ours + "output.weight"] = {att + "output.weight", Transform::kSame, scale};
    m.sources[ours + "ffn_key.weight"] = {ffn + "key.weight"};
    m.sources[ours + "ffn_receptance.weight"] = {ffn + "receptance.weight"};
    m.sources[ours + "ffn_value.weight"] = {ffn + "value.weight", Transform::kSame, scale};
  }
  m.sources["embedding.weight"] = {spec.embedding};
  m.sources["final_norm.gain"] = {spec.prefix + "ln_out.weight"};
  m.sources["final_norm.bias"] = {spec.prefix + "ln_out.bias"};
  if (!spec.config.tie_embeddings) m.sources["head_weight"] = {"head.weight"};
  return m;
}

}  // namespace

absl::StatusOr<std::string> HfModelType(const std::string& config_json) {
  absl::StatusOr<Json> config = ParseConfigObject(config_json);
  if (!config.ok()) return config.status();
  auto type = config->find("model_type");
  if (type != config->end()) {
    if (!type->is_string()) return RefuseKey("model_type", "must be a string, got " + type->dump());
    return type->get<std::string>();
  }
  if (config->contains("ssm_cfg") && config->contains("d_model")) return std::string("mamba2");
  return std::string();
}

absl::StatusOr<HfModelSpec> ParseHfModelSpec(const std::string& config_json) {
  absl::StatusOr<Json> parsed = ParseConfigObject(config_json);
  if (!parsed.ok()) return parsed.status();
  const Json& config = *parsed;
  absl::StatusOr<HfModelSpec> spec;
  auto type = config.find("model_type");
  if (type != config.end() && *type == "mamba2") {
    spec = TransformersMamba2(config);
  } else if (type != config.end() && *type == "rwkv") {
    spec = TransformersRwkv4(config);
  } else if (type == config.end() && config.contains("ssm_cfg") && config.contains("d_model")) {
    spec = MambaSsmMamba2(config);
  } else {
    return RefuseKey("model_type", absl::StrCat(type == config.end() ? "missing" : type->dump(),
                                                " is not Mamba-2's or RWKV-4's"));
  }
  if (!spec.ok()) return spec.status();
  if (auto eos = config.find("eos_token_id"); eos != config.end() && eos->is_number_integer()) {
    spec->eos_token_id = eos->get<int64_t>();
  }
  return spec;
}

absl::StatusOr<CausalLm> ImportHfModel(HfModelSpec spec, const TensorMap& tensors) {
  LmConfig& c = spec.config;
  absl::StatusOr<int64_t> vocab = TensorSize(tensors, spec.embedding, 2, 0);
  absl::StatusOr<int64_t> width = TensorSize(tensors, spec.embedding, 2, 1);
  if (!vocab.ok()) return vocab.status();
  if (*width != c.d_model) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", spec.embedding, " has width ", *width,
                                                   "; config.json says ", c.d_model));
  }
  c.vocab_size = *vocab;
  if (absl::Status valid = c.Validate(); !valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json describes no valid model: ", valid.message()));
  }
  Mapping mapping = c.mixer == MixerKind::kMamba2 ? Mamba2Mapping(spec) : Rwkv4Mapping(spec);
  // A tied head may also be stored; it must then be the embedding.
  const std::string head = c.mixer == MixerKind::kMamba2 ? "lm_head.weight" : "head.weight";
  if (c.tie_embeddings) {
    if (const torch::Tensor* stored = FindTensor(tensors, head)) {
      const torch::Tensor& embedding = tensors.at(spec.embedding);
      if (stored->sizes() != embedding.sizes() || !torch::equal(*stored, embedding)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", head, " differs from ", spec.embedding, ", but config.json ties them"));
      }
      mapping.may_skip.insert(head);
    }
  }
  return BuildModel(c, mapping, tensors);
}

}  // namespace attn
