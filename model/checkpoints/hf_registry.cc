#include "model/checkpoints/hf_registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/checkpoints/granite_checkpoint.h"
#include "model/checkpoints/hf_checkpoint.h"
#include "model/checkpoints/lfm2_checkpoint.h"
#include "model/checkpoints/rwkv7_checkpoint.h"

namespace attn {
namespace {

absl::StatusOr<CausalLm> ImportRwkv7Directory(const std::string& config_json,
                                              const TensorMap& tensors, std::string* layout) {
  absl::StatusOr<Rwkv7HfOptions> options = ParseRwkv7HfConfig(config_json);
  if (!options.ok()) return options.status();
  *layout = "huggingface-rwkv7";
  return ImportRwkv7(tensors, Rwkv7Layout::kHuggingFace, *options);
}

absl::StatusOr<CausalLm> ImportSpecDirectory(const std::string& config_json,
                                             const TensorMap& tensors, std::string* layout) {
  absl::StatusOr<HfModelSpec> spec = ParseHfModelSpec(config_json);
  if (!spec.ok()) return spec.status();
  *layout = spec->layout;
  return ImportHfModel(*std::move(spec), tensors);
}

}  // namespace

const std::vector<HfArchitecture>& HfArchitectures() {
  static const auto* const table = new std::vector<HfArchitecture>{
      {"rwkv7", "RWKV-7", HfTokenizer::kRwkvWorld, ImportRwkv7Directory},
      {"mamba2", "Mamba-2", HfTokenizer::kTokenizerJson, ImportSpecDirectory},
      {"rwkv", "RWKV-4", HfTokenizer::kTokenizerJson, ImportSpecDirectory},
      {"lfm2", "LFM2", HfTokenizer::kTokenizerJson, ImportLfm2},
      {"granitemoehybrid", "Granite 4.0-H", HfTokenizer::kTokenizerJson, ImportGranite},
  };
  return *table;
}

absl::StatusOr<const HfArchitecture*> FindHfArchitecture(const std::string& config_json) {
  absl::StatusOr<std::string> type = HfModelType(config_json);
  if (!type.ok()) return type.status();
  std::vector<std::string> known;
  for (const HfArchitecture& architecture : HfArchitectures()) {
    if (architecture.model_type == *type) return &architecture;
    known.push_back(absl::StrCat("\"", architecture.model_type, "\" (", architecture.name, ")"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("config.json: model_type: ", type->empty() ? "missing" : "\"" + *type + "\"",
                   "; supported: ", absl::StrJoin(known, ", "), ", and mamba_ssm's config"));
}

}  // namespace attn
