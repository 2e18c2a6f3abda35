// A Hugging Face config.json (Python's JSON, with Infinity and NaN) through
// the import registry (model/checkpoints/hf_registry.h): any text names an
// architecture or is refused, and whatever the architecture's parser makes
// of it, an empty checkpoint is refused by name.
#include <cstdint>
#include <string>

#include "model/checkpoints/hf_registry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  auto architecture = attn::FindHfArchitecture(input);
  if (!architecture.ok()) return 0;
  std::string layout;
  if ((*architecture)->import(input, {}, &layout).ok()) __builtin_trap();
  return 0;
}
