// A Hugging Face config.json of a Mamba-2 or RWKV-4 model (Python's JSON,
// with Infinity and NaN) into the model configuration it describes: any
// text is parsed or refused, and what is accepted validates once given a
// vocabulary.
#include <cstdint>
#include <string>

#include "model/checkpoints/hf_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  auto json = attn::ParsePythonJson(input);
  if (!json.ok()) return 0;
  auto spec = attn::ParseHfModelSpec(*json);
  if (!spec.ok()) return 0;
  spec->config.vocab_size = 16;
  (void)spec->config.Validate();
  // An empty checkpoint is refused by name, whatever the config.
  if (attn::ImportHfModel(*spec, {}).ok()) __builtin_trap();
  return 0;
}
