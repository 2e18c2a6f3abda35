#include "model/checkpoints/public_shapes.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/checkpoints/hf_checkpoint.h"
#include "model/mixers/mixer_options.h"

namespace attn {
namespace {

struct Shape {
  const char* name;
  int64_t d_model, layers;
};

constexpr Shape kRwkv7[] = {{"rwkv7-0.1b", 768, 12},
                            {"rwkv7-0.4b", 1024, 24},
                            {"rwkv7-1.5b", 2048, 24},
                            {"rwkv7-2.9b", 2560, 32},
                            {"rwkv7-7.2b", 4096, 32}};
constexpr Shape kMamba2[] = {{"mamba2-130m", 768, 24},
                             {"mamba2-370m", 1024, 48},
                             {"mamba2-780m", 1536, 48},
                             {"mamba2-1.3b", 2048, 48},
                             {"mamba2-2.7b", 2560, 64}};

constexpr int64_t kRwkvVocab = 65536;   // the RWKV World vocabulary
constexpr int64_t kNeoXVocab = 50288;   // GPT-NeoX's 50,277, padded to a multiple of 16
constexpr int64_t kRwkv7HeadSize = 64;  // every x070 model's

// What ConfigOf in rwkv7_checkpoint.cc reads from a BlinkDL checkpoint of
// this shape.
LmConfig Rwkv7Config(const Shape& shape) {
  LmConfig c;
  c.mixer = MixerKind::kRwkv7;
  c.norm = NormKind::kLayerNorm;
  c.positions = PositionKind::kNone;
  c.vocab_size = kRwkvVocab;
  c.d_model = shape.d_model;
  c.layers = shape.layers;
  c.heads = shape.d_model / kRwkv7HeadSize;
  c.ff_hidden = 4 * shape.d_model;
  c.rwkv7_ranks = DefaultRwkv7Ranks(shape.d_model);
  c.tie_embeddings = false;
  c.group_norm_eps = 64e-5;
  c.max_context = 2048;  // unused by a recurrent model
  return c;
}

// mamba_ssm's config.json of this shape, as the importer parses it.
absl::StatusOr<LmConfig> Mamba2Config(const Shape& shape) {
  const std::string json = absl::StrCat(
      R"({"d_model": )", shape.d_model, R"(, "d_intermediate": 0, "n_layer": )", shape.layers,
      R"(, "vocab_size": 50277, "ssm_cfg": {"layer": "Mamba2"}, "attn_layer_idx": [],)",
      R"( "attn_cfg": {}, "rms_norm": true, "residual_in_fp32": true, "fused_add_norm": true,)",
      R"( "pad_vocab_size_multiple": 16, "tie_embeddings": true})");
  absl::StatusOr<HfModelSpec> spec = ParseHfModelSpec(json);
  if (!spec.ok()) return spec.status();
  spec->config.vocab_size = kNeoXVocab;
  return spec->config;
}

}  // namespace

std::vector<std::string> PublicShapeNames() {
  std::vector<std::string> names;
  for (const Shape& s : kRwkv7) names.push_back(s.name);
  for (const Shape& s : kMamba2) names.push_back(s.name);
  return names;
}

absl::StatusOr<LmConfig> PublicShapeConfig(absl::string_view name) {
  absl::StatusOr<LmConfig> config = absl::InvalidArgumentError(absl::StrCat(
      "no public shape \"", name, "\"; one of ", absl::StrJoin(PublicShapeNames(), ", ")));
  for (const Shape& s : kRwkv7) {
    if (name == s.name) config = Rwkv7Config(s);
  }
  for (const Shape& s : kMamba2) {
    if (name == s.name) config = Mamba2Config(s);
  }
  if (!config.ok()) return config;
  if (absl::Status valid = config->Validate(); !valid.ok()) return valid;
  return config;
}

}  // namespace attn
