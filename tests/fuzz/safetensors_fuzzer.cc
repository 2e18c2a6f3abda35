// ReadSafetensorsBytes on arbitrary bytes (a downloaded model.safetensors):
// the header's length and JSON, every tensor's dtype, shape and offsets. A
// file that reads must hold tensors whose sizes its offsets covered.
#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "model/checkpoints/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto tensors = attn::ReadSafetensorsBytes(bytes);
  if (!tensors.ok()) return 0;
  uint64_t elements = 0;
  for (const auto& [name, tensor] : *tensors) {
    if (tensor.scalar_type() != torch::kFloat) __builtin_trap();
    elements += static_cast<uint64_t>(tensor.numel());
  }
  if (elements * 2 > size) __builtin_trap();  // at least two bytes per element were read
  return 0;
}
