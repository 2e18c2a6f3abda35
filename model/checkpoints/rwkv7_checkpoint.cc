#include "model/checkpoints/rwkv7_checkpoint.h"

#include <torch/torch.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/checkpoints/tensor_mapping.h"
#include "nlohmann/json.hpp"

namespace attn {
namespace {

// The checkpoint tensor behind each of block `l`'s parameters (named as in
// model/mixers/rwkv7.h), in `layout`.
std::map<std::string, Source> BlockSources(int64_t l, Rwkv7Layout layout) {
  const bool blink = layout == Rwkv7Layout::kBlinkDl;
  const std::string block =
      blink ? absl::StrCat("blocks.", l, ".") : absl::StrCat("model.layers.", l, ".");
  const std::string att = block + (blink ? "att." : "attn.");
  const std::string ffn = block + "ffn.";
  auto norm = [&](const std::string& ours, const std::string& blink_name, const std::string& hf) {
    const std::string theirs = block + (blink ? blink_name : hf);
    return std::vector<std::pair<std::string, Source>>{{ours + ".gain", {theirs + ".weight"}},
                                                       {ours + ".bias", {theirs + ".bias"}}};
  };
  auto lora = [&](const std::string& ours, const std::string& letter, bool bias) {
    std::vector<std::pair<std::string, Source>> out;
    if (blink) {
      out.push_back({ours + "_down.weight", {att + letter + "1", Transform::kTranspose}});
      out.push_back({ours + "_up.weight", {att + letter + "2", Transform::kTranspose}});
      if (bias) out.push_back({ours + "_bias", {att + letter + "0", Transform::kVector}});
    } else {
      out.push_back({ours + "_down.weight", {att + letter + "_lora.lora.0.weight"}});
      out.push_back({ours + "_up.weight", {att + letter + "_lora.lora.2.weight"}});
      if (bias) out.push_back({ours + "_bias", {att + letter + "_lora.lora.2.bias"}});
    }
    return out;
  };
  std::map<std::string, Source> sources;
  auto add = [&](const std::vector<std::pair<std::string, Source>>& entries) {
    for (const auto& [ours, source] : entries) sources[ours] = source;
  };
  if (l == 0) add(norm("ln0", "ln0", "pre_norm"));
  add(norm("ln1", "ln1", "attn_norm"));
  add(norm("ln2", "ln2", "ffn_norm"));
  for (const char* c : {"r", "w", "k", "v", "g"}) {
    sources[absl::StrCat("mix_", c)] = {att + "x_" + c, Transform::kVector};
  }
  sources["mix_i"] = {att + "x_a", Transform::kVector};
  add(lora("decay", "w", true));
  add(lora("iclr", "a", true));
  if (l > 0) add(lora("value", "v", true));
  add(lora("gate", "g", false));
  sources["key_norm_scale"] = {att + "k_k", Transform::kVector};
  sources["key_iclr_scale"] = {att + "k_a", Transform::kVector};
  sources["bonus"] = {att + "r_k"};
  sources["out_norm_gain"] = {att + (blink ? "ln_x.weight" : "g_norm.weight")};
  sources["out_norm_bias"] = {att + (blink ? "ln_x.bias" : "g_norm.bias")};
  const char* projections[][3] = {{"receptance", "receptance", "r_proj"},
                                  {"key", "key", "k_proj"},
                                  {"value", "value", "v_proj"},
                                  {"output", "output", "o_proj"}};
  for (const auto& p : projections) {
    sources[absl::StrCat(p[0], ".weight")] = {att + (blink ? p[1] : p[2]) + ".weight"};
  }
  sources["ffn_mix"] = {ffn + "x_k", Transform::kVector};
  sources["ffn_key.weight"] = {ffn + "key.weight"};
  sources["ffn_value.weight"] = {ffn + "value.weight"};
  return sources;
}

// The model's configuration from the tensors' shapes.
absl::StatusOr<LmConfig> ConfigOf(const TensorMap& tensors, Rwkv7Layout layout,
                                  const Rwkv7HfOptions& hf) {
  const bool blink = layout == Rwkv7Layout::kBlinkDl;
  const std::string block0 = blink ? "blocks.0." : "model.layers.0.";
  const std::string att0 = block0 + (blink ? "att." : "attn.");
  LmConfig c;
  c.mixer = MixerKind::kRwkv7;
  c.norm = NormKind::kLayerNorm;
  c.positions = PositionKind::kNone;
  auto size = [&](const std::string& name, int64_t dims, int64_t dim, int64_t* field) {
    absl::StatusOr<int64_t> s = TensorSize(tensors, name, dims, dim);
    if (s.ok()) *field = *s;
    return s.status();
  };
  const std::string embedding = blink ? "emb.weight" : "model.embeddings.weight";
  const int64_t low_rank_dim = blink ? 1 : 0;  // [C, D] in BlinkDL, [D, C] in HF
  const std::string down = blink ? "1" : "_lora.lora.0.weight";
  for (const absl::Status& s :
       {size(embedding, 2, 0, &c.vocab_size), size(embedding, 2, 1, &c.d_model),
        size(att0 + "r_k", 2, 0, &c.heads), size(block0 + "ffn.key.weight", 2, 0, &c.ff_hidden),
        size(att0 + "w" + down, 2, low_rank_dim, &c.rwkv7_ranks.decay),
        size(att0 + "a" + down, 2, low_rank_dim, &c.rwkv7_ranks.iclr),
        size(att0 + "g" + down, 2, low_rank_dim, &c.rwkv7_ranks.gate)}) {
    if (!s.ok()) return s;
  }
  c.layers = 0;
  while (FindTensor(tensors, (blink ? absl::StrCat("blocks.", c.layers, ".att.r_k")
                                    : absl::StrCat("model.layers.", c.layers, ".attn.r_k"))) !=
         nullptr) {
    ++c.layers;
  }
  if (c.layers > 1) {
    const std::string att1 = blink ? "blocks.1.att." : "model.layers.1.attn.";
    if (auto s = size(att1 + "v" + down, 2, low_rank_dim, &c.rwkv7_ranks.value); !s.ok()) return s;
  } else {
    c.rwkv7_ranks.value = DefaultRwkv7Ranks(c.d_model).value;  // no layer has the residual
  }
  c.tie_embeddings = blink ? FindTensor(tensors, "head.weight") == nullptr
                           : hf.tie_embeddings || FindTensor(tensors, "lm_head.weight") == nullptr;
  c.group_norm_eps = blink ? 64e-5 : (c.d_model / std::max<int64_t>(c.heads, 1)) * hf.norm_eps;
  c.max_context = 2048;  // unused by a recurrent model
  if (absl::Status valid = c.Validate(); !valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the tensors describe no valid model: ", valid.message()));
  }
  return c;
}

}  // namespace

absl::Status CheckRwkvVersion(const TensorMap& tensors) {
  bool v7 = false, v6 = false, v5 = false, v4 = false;
  for (const auto& [name, tensor] : tensors) {
    v7 |= absl::EndsWith(name, "att.r_k");
    v6 |= absl::EndsWith(name, "att.time_maa_x");
    v5 |= absl::EndsWith(name, "att.time_faaaa");
    v4 |= absl::EndsWith(name, "att.time_first");
  }
  if (v7) return absl::OkStatus();
  const int version = v6 ? 6 : v5 ? 5 : v4 ? 4 : 0;
  if (version == 0) {
    return absl::InvalidArgumentError(
        "no blocks.N.att.r_k or earlier RWKV names: not an RWKV checkpoint");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "an RWKV-", version, " checkpoint; this server serves RWKV-7 (blocks.N.att.r_k)"));
}

absl::StatusOr<CausalLm> ImportRwkv7(const TensorMap& tensors, Rwkv7Layout layout,
                                     const Rwkv7HfOptions& hf) {
  absl::StatusOr<LmConfig> config = ConfigOf(tensors, layout, hf);
  if (!config.ok()) return config.status();
  const bool blink = layout == Rwkv7Layout::kBlinkDl;
  std::map<std::string, Source> sources;
  for (int64_t l = 0; l < config->layers; ++l) {
    for (auto& [ours, source] : BlockSources(l, layout)) {
      sources[absl::StrCat("layers.", l, ".mixer.", ours)] = source;
    }
  }
  sources["embedding.weight"] = {blink ? "emb.weight" : "model.embeddings.weight"};
  sources["final_norm.gain"] = {blink ? "ln_out.weight" : "model.norm.weight"};
  sources["final_norm.bias"] = {blink ? "ln_out.bias" : "model.norm.bias"};
  if (!config->tie_embeddings) sources["head_weight"] = {blink ? "head.weight" : "lm_head.weight"};
  Mapping mapping;
  mapping.sources = std::move(sources);
  mapping.model_name = "an RWKV-7 model";
  if (blink) mapping.may_skip = {"blocks.0.att.v0", "blocks.0.att.v1", "blocks.0.att.v2"};
  if (!blink && !hf.norm_first) {
    // Without pre_norm (norm_first false) layer 0 takes the embedding as it
    // is: ln0 is the identity.
    mapping.preset = [](const std::string& name, torch::Tensor& value) {
      if (!absl::StartsWith(name, "layers.0.mixer.ln0.")) return false;
      value.fill_(absl::EndsWith(name, ".gain") ? 1.0 : 0.0);
      return true;
    };
  }
  return BuildModel(*config, mapping, tensors);
}

absl::StatusOr<std::vector<torch::Tensor>> ReadRwkv7InitialState(const std::string& path,
                                                                 const LmConfig& config) {
  absl::StatusOr<TensorMap> tensors = ReadTorchCheckpoint(path);
  if (!tensors.ok()) return tensors.status();
  const int64_t c = config.d_model, heads = config.heads, n = config.d_model / config.heads;
  std::vector<torch::Tensor> row;
  for (int64_t l = 0; l < config.layers; ++l) {
    const std::string name = absl::StrCat("blocks.", l, ".att.time_state");
    const torch::Tensor* state = FindTensor(*tensors, name);
    if (state == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": missing tensor ", name));
    }
    if (state->sizes() != torch::IntArrayRef({heads, n, n})) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor ", name, " has shape ",
                                                     ShapeText(*state), "; the model's is [", heads,
                                                     ", ", n, ", ", n, "]"));
    }
    if (!torch::isfinite(*state).all().item<bool>()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor ", name, " is not finite"));
    }
    row.push_back(torch::zeros({1}, torch::kLong));
    row.push_back(torch::zeros({1, c}));
    row.push_back(state->transpose(1, 2).contiguous().unsqueeze(0));
    row.push_back(torch::zeros({1, c}));
  }
  if (static_cast<int64_t>(tensors->size()) != config.layers) {
    for (const auto& [name, tensor] : *tensors) {
      if (!absl::StartsWith(name, "blocks.") || !absl::EndsWith(name, ".att.time_state")) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": tensor ", name, " is not an initial state's"));
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", tensors->size(), " layers' states; the model has ", config.layers));
  }
  return row;
}

absl::StatusOr<Rwkv7HfOptions> ParseRwkv7HfConfig(const std::string& text) {
  const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError("config.json: not a JSON object");
  }
  auto refuse = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", what));
  };
  if (!json.contains("model_type") || json["model_type"] != "rwkv7") {
    const std::string found = json.contains("model_type") ? json["model_type"].dump() : "missing";
    return refuse(absl::StrCat("model_type ", found, " is not RWKV-7's"));
  }
  if (json.contains("attn") && !json["attn"].is_null()) {
    return refuse("attn: hybrid attention layers are not supported");
  }
  if (json.contains("value_dim") && !json["value_dim"].is_null()) {
    const auto& v = json["value_dim"];
    const int64_t hidden = json.contains("hidden_size") && json["hidden_size"].is_number_integer()
                               ? json["hidden_size"].get<int64_t>()
                               : 0;
    const bool same = v.is_number_integer()
                          ? v.get<int64_t>() == hidden
                          : v.is_array() && std::all_of(v.begin(), v.end(),
                                                        [&](const auto& x) { return x == hidden; });
    if (!same) return refuse("value_dim: a value width other than hidden_size is not supported");
  }
  Rwkv7HfOptions options;
  if (json.contains("norm_eps") && json["norm_eps"].is_number()) {
    options.norm_eps = json["norm_eps"].get<double>();
  }
  if (std::abs(options.norm_eps - 1e-5) > 1e-12) {
    return refuse(absl::StrCat("norm_eps ", options.norm_eps, " (only 1e-5 is supported)"));
  }
  if (json.contains("norm_bias") && json["norm_bias"] == false) {
    return refuse("norm_bias false is not supported");
  }
  for (auto [key, field] :
       {std::pair<const char*, bool*>{"tie_word_embeddings", &options.tie_embeddings},
        {"norm_first", &options.norm_first}}) {
    if (!json.contains(key) || json[key].is_null()) continue;
    if (!json[key].is_boolean()) return refuse(absl::StrCat(key, ": must be true or false"));
    *field = json[key].get<bool>();
  }
  return options;
}

}  // namespace attn
