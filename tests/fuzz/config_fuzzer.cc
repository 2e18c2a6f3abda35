// LmConfig::FromJson on arbitrary bytes: the configuration a model package
// carries, read before anything else of the package is trusted. A config
// that parses must be valid and survive ToJson -> FromJson unchanged; a
// refusal must say what is wrong.
#include <cstdint>
#include <string>

#include "model/lm/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<attn::LmConfig> config = attn::LmConfig::FromJson(json);
  if (!config.ok()) {
    if (config.status().message().empty()) __builtin_trap();
    return 0;
  }
  if (!config->Validate().ok()) __builtin_trap();
  const std::string written = config->ToJson();
  absl::StatusOr<attn::LmConfig> again = attn::LmConfig::FromJson(written);
  if (!again.ok() || again->ToJson() != written) __builtin_trap();
  // The options every layer's mixer would be built with stay in range.
  const attn::MixerOptions options = config->mixer_options();
  if (options.chunk <= 0 || options.d_model % options.heads != 0) __builtin_trap();
  return 0;
}
