#include "model/lm/config.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "util/enum_names.h"
#include "util/field_error.h"

namespace attn {
namespace {

constexpr std::pair<PositionKind, const char*> kPositionNames[] = {
    {PositionKind::kNone, "none"},
    {PositionKind::kSinusoidal, "sinusoidal"},
    {PositionKind::kLearned, "learned"},
};

using Json = nlohmann::json;

// The integer at `key`; errors name the key.
absl::StatusOr<int64_t> IntAt(const Json& json, const char* key) {
  auto it = json.find(key);
  if (it == json.end()) return InvalidField(key, "missing");
  if (!it->is_number_integer()) return InvalidField(key, "must be an integer, got ", it->dump());
  return it->get<int64_t>();
}

// The string at `key`; errors name the key.
absl::StatusOr<std::string> StringAt(const Json& json, const char* key) {
  auto it = json.find(key);
  if (it == json.end()) return InvalidField(key, "missing");
  if (!it->is_string()) return InvalidField(key, "must be a string, got ", it->dump());
  return it->get<std::string>();
}

// Parses the enum name at `key` with `parse`; errors name the key.
template <typename Enum>
absl::Status EnumAt(const Json& json, const char* key, bool (*parse)(const std::string&, Enum*),
                    Enum* value) {
  auto name = StringAt(json, key);
  if (!name.ok()) return name.status();
  if (!parse(*name, value)) return InvalidField(key, "unknown value \"", *name, "\"");
  return absl::OkStatus();
}

// Reads the integers `fields` of the object at `key` (all required, no
// others allowed); errors name "key.field".
absl::Status IntObjectAt(const Json& json, const char* key,
                         std::initializer_list<std::pair<const char*, int64_t*>> fields,
                         std::set<std::string> inner = {}) {
  auto it = json.find(key);
  if (!it->is_object()) return InvalidField(key, "must be an object, got ", it->dump());
  for (auto [name, field] : fields) {
    inner.insert(name);
    auto value = IntAt(*it, name);
    if (!value.ok()) return InvalidField(absl::StrCat(key, ".", name), value.status().message());
    *field = *value;
  }
  for (const auto& item : it->items()) {
    if (!inner.count(item.key())) {
      return InvalidField(absl::StrCat(key, ".", item.key()), "unknown config key");
    }
  }
  return absl::OkStatus();
}

// The number at `key` of `json` into `*value` when present; errors name
// `path`.
absl::Status OptionalNumber(const Json& json, const char* key, const std::string& path,
                            double* value) {
  auto it = json.find(key);
  if (it == json.end()) return absl::OkStatus();
  if (!it->is_number()) return InvalidField(path, "must be a number, got ", it->dump());
  *value = it->get<double>();
  return absl::OkStatus();
}

// The boolean at `key` of `json` into `*value` when present; errors name
// `path`.
absl::Status OptionalBool(const Json& json, const char* key, const std::string& path, bool* value) {
  auto it = json.find(key);
  if (it == json.end()) return absl::OkStatus();
  if (!it->is_boolean()) return InvalidField(path, "must be true or false, got ", it->dump());
  *value = it->get<bool>();
  return absl::OkStatus();
}

// The object attention's optional keys besides kv_heads and layers.
absl::Status AttentionOptions(const Json& attention, LmConfig* config) {
  if (auto heads = attention.find("heads"); heads != attention.end()) {
    if (!heads->is_number_integer()) {
      return InvalidField("attention.heads", "must be an integer, got ", heads->dump());
    }
    config->attention_heads = heads->get<int64_t>();
  }
  if (auto s = OptionalNumber(attention, "rope_theta", "attention.rope_theta", &config->rope_theta);
      !s.ok()) {
    return s;
  }
  if (auto s = OptionalBool(attention, "rope", "attention.rope", &config->rope); !s.ok()) return s;
  return OptionalBool(attention, "qk_norm", "attention.qk_norm", &config->qk_norm);
}

// The hybrid keys (ToJson): ff, norm_eps, whole_block_ff, and the objects
// attention and short_conv. Adds them to `known`.
absl::Status HybridKeys(const Json& json, LmConfig* config, std::set<std::string>* known) {
  known->insert({"ff", "norm_eps", "attention", "short_conv", "whole_block_ff", "moe"});
  if (json.contains("moe")) {
    if (auto s = IntObjectAt(json, "moe",
                             {{"experts", &config->moe.experts},
                              {"top_k", &config->moe.top_k},
                              {"hidden", &config->moe.hidden}});
        !s.ok()) {
      return s;
    }
  }
  if (auto s = OptionalBool(json, "whole_block_ff", "whole_block_ff", &config->whole_block_ff);
      !s.ok()) {
    return s;
  }
  if (json.contains("ff")) {
    if (auto s = EnumAt(json, "ff", &ParseFeedForwardKind, &config->ff); !s.ok()) return s;
  }
  if (auto s = OptionalNumber(json, "norm_eps", "norm_eps", &config->norm_eps); !s.ok()) return s;
  if (json.contains("short_conv")) {
    if (auto s = IntObjectAt(json, "short_conv", {{"kernel", &config->conv_kernel}}); !s.ok()) {
      return s;
    }
  }
  if (!json.contains("attention")) return absl::OkStatus();
  if (auto s = IntObjectAt(json, "attention", {{"kv_heads", &config->kv_heads}},
                           {"layers", "rope_theta", "qk_norm", "heads", "rope"});
      !s.ok()) {
    return s;
  }
  const Json& attention = json.at("attention");
  auto layers = attention.find("layers");
  if (layers == attention.end() || !layers->is_array()) {
    return InvalidField("attention.layers", "missing or not an array");
  }
  for (const Json& layer : *layers) {
    if (!layer.is_number_integer()) {
      return InvalidField("attention.layers", "must hold integers, got ", layer.dump());
    }
    config->attention_layers.push_back(layer.get<int64_t>());
  }
  return AttentionOptions(attention, config);
}

// The keys only some models have (ToJson): tie_embeddings, and the objects
// of rwkv7, rwkv4 and mamba2. Adds them to `known`.
absl::Status OptionalKeys(const Json& json, LmConfig* config, std::set<std::string>* known) {
  known->insert({"tie_embeddings", "rwkv7", "rwkv4", "mamba2"});
  if (auto s = HybridKeys(json, config, known); !s.ok()) return s;
  if (auto it = json.find("tie_embeddings"); it != json.end()) {
    if (!it->is_boolean()) return InvalidField("tie_embeddings", "must be true or false");
    config->tie_embeddings = it->get<bool>();
  }
  if (json.contains("rwkv4")) {
    if (auto s = IntObjectAt(json, "rwkv4", {{"rescale_every", &config->rescale_every}}); !s.ok()) {
      return s;
    }
  }
  if (json.contains("mamba2")) {
    Mamba2Sizes& m = config->mamba2;
    if (auto s = IntObjectAt(json, "mamba2",
                             {{"state_size", &m.state_size},
                              {"conv_kernel", &m.conv_kernel},
                              {"expand", &m.expand},
                              {"groups", &m.groups}});
        !s.ok()) {
      return s;
    }
  }
  if (!json.contains("rwkv7")) return absl::OkStatus();
  if (auto s = IntObjectAt(json, "rwkv7",
                           {{"decay_rank", &config->rwkv7_ranks.decay},
                            {"iclr_rank", &config->rwkv7_ranks.iclr},
                            {"value_rank", &config->rwkv7_ranks.value},
                            {"gate_rank", &config->rwkv7_ranks.gate}},
                           {"group_norm_eps"});
      !s.ok()) {
    return s;
  }
  const Json& rwkv7 = json.at("rwkv7");
  auto eps = rwkv7.find("group_norm_eps");
  if (eps == rwkv7.end() || !eps->is_number()) {
    return InvalidField("rwkv7.group_norm_eps", "missing or not a number");
  }
  config->group_norm_eps = eps->get<double>();
  return absl::OkStatus();
}

}  // namespace

NormKind WholeBlockNorm(MixerKind kind) {
  return kind == MixerKind::kMamba2 ? NormKind::kRmsNorm : NormKind::kLayerNorm;
}

std::string PositionKindName(PositionKind kind) { return EnumName(kPositionNames, kind); }

bool ParsePositionKind(const std::string& name, PositionKind* kind) {
  return ParseEnumName(kPositionNames, name, kind);
}

MixerOptions LmConfig::mixer_options() const {
  MixerOptions o;
  o.kind = mixer;
  o.d_model = d_model;
  o.heads = heads;
  o.max_context = max_context;
  o.window = window;
  o.chunk = chunk > 0 ? chunk : DefaultChunk(mixer);
  o.ff_hidden = ff_hidden;
  const Rwkv7Ranks defaults = DefaultRwkv7Ranks(d_model);
  o.rwkv7_ranks = {rwkv7_ranks.decay > 0 ? rwkv7_ranks.decay : defaults.decay,
                   rwkv7_ranks.iclr > 0 ? rwkv7_ranks.iclr : defaults.iclr,
                   rwkv7_ranks.value > 0 ? rwkv7_ranks.value : defaults.value,
                   rwkv7_ranks.gate > 0 ? rwkv7_ranks.gate : defaults.gate};
  o.group_norm_eps = group_norm_eps;
  o.rescale_every = rescale_every;
  o.mamba2 = mamba2;
  o.conv_kernel = conv_kernel;
  o.kv_heads = kv_heads;
  o.rope = rope;
  o.rope_theta = rope_theta;
  o.qk_norm = qk_norm;
  o.norm_eps = norm_eps;
  return o;
}

MixerKind LmConfig::layer_mixer(int64_t layer) const {
  const bool attention =
      std::binary_search(attention_layers.begin(), attention_layers.end(), layer);
  return attention ? MixerKind::kGqa : mixer;
}

bool LmConfig::has_attention() const {
  return mixer == MixerKind::kGqa || !attention_layers.empty();
}

absl::Status LmConfig::ValidateHybrid() const {
  if (!(norm_eps > 0 && norm_eps < 1)) {
    return InvalidField("norm_eps", "must be in (0, 1), got ", norm_eps);
  }
  if (whole_block_ff && mixer != MixerKind::kMamba2) {
    return InvalidField("whole_block_ff", "only mamba2 blocks take a feed-forward after them, not ",
                        MixerKindName(mixer));
  }
  if (IsWholeBlock(mixer) && !whole_block_ff && ff != FeedForwardKind::kGelu) {
    return InvalidField("ff", MixerKindName(mixer), " blocks bring their own feed-forward");
  }
  const bool among = !IsWholeBlock(mixer) || whole_block_ff;
  if (!attention_layers.empty() && (!among || mixer == MixerKind::kGqa)) {
    return InvalidField("attention.layers", "attention layers go among plain mixers or mamba2 ",
                        "blocks with whole_block_ff, not ", MixerKindName(mixer), " layers");
  }
  for (size_t i = 0; i < attention_layers.size(); ++i) {
    const int64_t layer = attention_layers[i];
    if (layer < 0 || layer >= layers || (i > 0 && layer <= attention_layers[i - 1])) {
      return InvalidField("attention.layers", "must be increasing layer indices below ", layers,
                          ", got ", layer, " at ", i);
    }
  }
  if (attention_heads < 0) {
    return InvalidField("attention.heads", "must be at least 0 (0: heads), got ", attention_heads);
  }
  if (has_attention()) {
    if (gqa_heads() <= 0 || d_model % gqa_heads() != 0) {
      return InvalidField("attention.heads", gqa_heads(), " must divide d_model (", d_model, ")");
    }
    const int64_t kv = kv_heads > 0 ? kv_heads : gqa_heads();
    if (kv_heads < 0 || gqa_heads() % kv != 0) {
      return InvalidField("attention.kv_heads", kv_heads, " must divide the query heads (",
                          gqa_heads(), ")");
    }
    if (rope && (d_model / gqa_heads()) % 2 != 0) {
      return InvalidField("heads", "rotary positions need an even head size, got ",
                          d_model / gqa_heads());
    }
    if (rope && !(rope_theta > 1 && rope_theta < 1e12)) {
      return InvalidField("attention.rope_theta", "must be in (1, 1e12), got ", rope_theta);
    }
  }
  if (moe.experts != 0) {
    if (moe.experts < 0 || moe.experts > 4096) {
      return InvalidField("moe.experts", "must be in [0, 4096], got ", moe.experts);
    }
    if (moe.top_k < 1 || moe.top_k > moe.experts) {
      return InvalidField("moe.top_k", "must be in [1, experts], got ", moe.top_k);
    }
    if (moe.hidden < 1 || moe.hidden > (1 << 20)) {
      return InvalidField("moe.hidden", "must be in [1, 2^20], got ", moe.hidden);
    }
    if (ff != FeedForwardKind::kSwiGlu || (IsWholeBlock(mixer) && !whole_block_ff)) {
      return InvalidField("moe", "experts go beside a SwiGLU feed-forward (ff swiglu)");
    }
  }
  if (mixer == MixerKind::kShortConv && (conv_kernel < 2 || conv_kernel > 1024)) {
    return InvalidField("short_conv.kernel", "must be in [2, 1024], got ", conv_kernel);
  }
  return absl::OkStatus();
}

absl::Status LmConfig::ValidateMamba2() const {
  for (auto [name, value] :
       {std::pair<const char*, int64_t>{"mamba2.state_size", mamba2.state_size},
        {"mamba2.expand", mamba2.expand},
        {"mamba2.groups", mamba2.groups}}) {
    if (value <= 0) return InvalidField(name, "must be positive, got ", value);
  }
  if (mamba2.conv_kernel < 2) {
    return InvalidField("mamba2.conv_kernel", "must be at least 2, got ", mamba2.conv_kernel);
  }
  // Bounds far past any released model's, so that products of sizes stay
  // far from overflowing.
  for (auto [name, value, limit] :
       {std::tuple<const char*, int64_t, int64_t>{"mamba2.state_size", mamba2.state_size, 1 << 16},
        {"mamba2.conv_kernel", mamba2.conv_kernel, 1 << 10},
        {"mamba2.expand", mamba2.expand, 1 << 6},
        {"mamba2.groups", mamba2.groups, 1 << 16}}) {
    if (value > limit) return InvalidField(name, "must be at most ", limit, ", got ", value);
  }
  if (heads % mamba2.groups != 0) {
    return InvalidField("mamba2.groups", mamba2.groups, " must divide heads (", heads, ")");
  }
  return absl::OkStatus();
}

absl::Status LmConfig::Validate() const {
  auto positive = [](const char* name, int64_t value) -> absl::Status {
    if (value > 0) return absl::OkStatus();
    return InvalidField(name, "must be positive, got ", value);
  };
  for (auto [name, value] : {std::pair<const char*, int64_t>{"vocab_size", vocab_size},
                             {"d_model", d_model},
                             {"layers", layers},
                             {"heads", heads},
                             {"ff_hidden", ff_hidden},
                             {"window", window},
                             {"max_context", max_context}}) {
    if (auto status = positive(name, value); !status.ok()) return status;
  }
  if (chunk < 0) {
    return InvalidField("chunk", "must be at least 0 (0: per mixer), got ", chunk);
  }
  if (mixer == MixerKind::kMamba2) {
    if (auto status = ValidateMamba2(); !status.ok()) return status;
    const __int128 inner = static_cast<__int128>(mamba2.expand) * d_model;  // no overflow
    if (inner % heads != 0) {
      return InvalidField("heads", heads, " must divide mamba2's inner width (expand ",
                          mamba2.expand, " x d_model ", d_model, ")");
    }
  } else if (d_model % heads != 0) {
    return InvalidField("d_model", d_model, " must be divisible by heads (", heads, ")");
  }
  if (d_model % 2 != 0 && positions == PositionKind::kSinusoidal) {
    return InvalidField("d_model", "sinusoidal positions need an even d_model, got ", d_model);
  }
  if (mixer == MixerKind::kAftLocal && window > max_context) {
    return InvalidField("window", window, " exceeds max_context (", max_context, ")");
  }
  if (IsWholeBlock(mixer)) {
    const NormKind block_norm = WholeBlockNorm(mixer);
    if (norm != block_norm) {
      return InvalidField("norm", MixerKindName(mixer), " blocks use ", NormKindName(block_norm),
                          ", got ", NormKindName(norm));
    }
    if (positions != PositionKind::kNone) {
      return InvalidField("positions", MixerKindName(mixer),
                          " blocks take no position embedding, got ", PositionKindName(positions));
    }
  }
  if (mixer == MixerKind::kRwkv4 && rescale_every < 0) {
    return InvalidField("rwkv4.rescale_every", "must be at least 0 (0: never), got ",
                        rescale_every);
  }
  if (auto status = ValidateHybrid(); !status.ok()) return status;
  if (mixer == MixerKind::kRwkv7) {
    for (auto [name, rank] :
         {std::pair<const char*, int64_t>{"rwkv7.decay_rank", rwkv7_ranks.decay},
          {"rwkv7.iclr_rank", rwkv7_ranks.iclr},
          {"rwkv7.value_rank", rwkv7_ranks.value},
          {"rwkv7.gate_rank", rwkv7_ranks.gate}}) {
      if (rank < 0) return InvalidField(name, "must be at least 0 (0: the default), got ", rank);
    }
    if (!(group_norm_eps > 0 && group_norm_eps < 1)) {
      return InvalidField("rwkv7.group_norm_eps", "must be in (0, 1), got ", group_norm_eps);
    }
  }
  return absl::OkStatus();
}

std::string LmConfig::ToJson() const {
  // Keys in sorted order (nlohmann's object is a sorted map), one per line,
  // so that a diff of two configs reads well.
  const Json json = {{"vocab_size", vocab_size},
                     {"d_model", d_model},
                     {"layers", layers},
                     {"heads", heads},
                     {"ff_hidden", ff_hidden},
                     {"mixer", MixerKindName(mixer)},
                     {"norm", NormKindName(norm)},
                     {"positions", PositionKindName(positions)},
                     {"window", window},
                     {"max_context", max_context},
                     {"chunk", chunk}};
  // Keys only some models have are written only for them, so that every
  // other model's config reads as it always has.
  Json full = json;
  if (!tie_embeddings) full["tie_embeddings"] = false;
  if (mixer == MixerKind::kRwkv7) {
    full["rwkv7"] = {{"decay_rank", rwkv7_ranks.decay},
                     {"iclr_rank", rwkv7_ranks.iclr},
                     {"value_rank", rwkv7_ranks.value},
                     {"gate_rank", rwkv7_ranks.gate},
                     {"group_norm_eps", group_norm_eps}};
  }
  if (mixer == MixerKind::kRwkv4) full["rwkv4"] = {{"rescale_every", rescale_every}};
  if (mixer == MixerKind::kMamba2) {
    full["mamba2"] = {{"state_size", mamba2.state_size},
                      {"conv_kernel", mamba2.conv_kernel},
                      {"expand", mamba2.expand},
                      {"groups", mamba2.groups}};
  }
  if (ff != FeedForwardKind::kGelu) full["ff"] = FeedForwardKindName(ff);
  if (norm_eps != 1e-5) full["norm_eps"] = norm_eps;
  if (whole_block_ff) full["whole_block_ff"] = true;
  if (moe.experts > 0) {
    full["moe"] = {{"experts", moe.experts}, {"top_k", moe.top_k}, {"hidden", moe.hidden}};
  }
  if (has_attention()) {
    full["attention"] = {{"layers", attention_layers},
                         {"kv_heads", kv_heads},
                         {"rope_theta", rope_theta},
                         {"qk_norm", qk_norm}};
    if (attention_heads > 0) full["attention"]["heads"] = attention_heads;
    if (!rope) full["attention"]["rope"] = false;
  }
  if (mixer == MixerKind::kShortConv) full["short_conv"] = {{"kernel", conv_kernel}};
  return full.dump(1);
}

absl::StatusOr<LmConfig> LmConfig::FromJson(const std::string& text) {
  const Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return InvalidField("config", "invalid JSON");
  if (!json.is_object()) return InvalidField("config", "must be a JSON object, got ", json.dump());
  LmConfig config;
  const std::pair<const char*, int64_t*> ints[] = {
      {"vocab_size", &config.vocab_size},   {"d_model", &config.d_model},
      {"layers", &config.layers},           {"heads", &config.heads},
      {"ff_hidden", &config.ff_hidden},     {"window", &config.window},
      {"max_context", &config.max_context}, {"chunk", &config.chunk}};
  std::set<std::string> known = {"mixer", "norm", "positions"};
  for (auto [key, field] : ints) {
    known.insert(key);
    auto value = IntAt(json, key);
    if (!value.ok()) return value.status();
    *field = *value;
  }
  for (const absl::Status& status :
       {EnumAt(json, "mixer", &ParseMixerKind, &config.mixer),
        EnumAt(json, "norm", &ParseNormKind, &config.norm),
        EnumAt(json, "positions", &ParsePositionKind, &config.positions)}) {
    if (!status.ok()) return status;
  }
  if (auto status = OptionalKeys(json, &config, &known); !status.ok()) return status;
  for (const auto& item : json.items()) {
    if (!known.count(item.key())) return InvalidField(item.key(), "unknown config key");
  }
  if (auto status = config.Validate(); !status.ok()) return status;
  return config;
}

}  // namespace attn
