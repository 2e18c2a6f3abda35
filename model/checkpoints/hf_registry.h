// The Hugging Face architectures this library imports, in one table keyed by
// config.json's model_type. A directory's config.json chooses its entry;
// the entry parses the rest of it (refusing by name what the blocks do not
// implement), says which tokenizer the model ships, and maps the tensors
// onto a CausalLm. A new architecture is one entry here and its mapping.
//
//   model_type "rwkv7"   RWKV-7, flash-linear-attention's layout
//                        (rwkv7_checkpoint.h); the RWKV World vocabulary
//   model_type "mamba2"  Mamba-2, transformers' layout, or mamba_ssm's
//                        config (no model_type) (hf_checkpoint.h);
//                        tokenizer.json
//   model_type "rwkv"    RWKV-4, transformers' layout (hf_checkpoint.h);
//                        tokenizer.json
//   model_type "lfm2"    LFM2, transformers' layout (lfm2_checkpoint.h);
//                        tokenizer.json
//   model_type "granitemoehybrid"
//                        Granite 4.0-H, transformers' layout
//                        (granite_checkpoint.h); tokenizer.json
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoints/torch_checkpoint.h"
#include "model/lm/language_model.h"

namespace attn {

// Which tokenizer file a model of an architecture ships.
enum class HfTokenizer {
  kRwkvWorld,      // rwkv_vocab_v20230424.txt (the RWKV World vocabulary)
  kTokenizerJson,  // tokenizer.json
};

struct HfArchitecture {
  std::string model_type;  // config.json's
  std::string name;        // for people: "RWKV-7"
  HfTokenizer tokenizer;
  // The model `config_json` (this architecture's) and `tensors` describe;
  // sets `*layout` to the layout's name for the package's source record.
  // kInvalidArgument naming the option, key or tensor that does not fit.
  absl::StatusOr<CausalLm> (*import)(const std::string& config_json, const TensorMap& tensors,
                                     std::string* layout);
};

// Every entry, in the order errors list them.
const std::vector<HfArchitecture>& HfArchitectures();

// The entry config.json's text names. kInvalidArgument starting
// "config.json: " for text that is not a JSON object, a model_type that is
// missing or not in the table (listing those that are).
absl::StatusOr<const HfArchitecture*> FindHfArchitecture(const std::string& config_json);

}  // namespace attn
