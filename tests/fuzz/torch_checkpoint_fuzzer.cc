// A BlinkDL .pth from arbitrary bytes: the first byte picks what the rest
// is. 0: a whole torch.save archive (its zip and checksums first). Else: the
// pickle of its state dict, past the checksums, over one fixed storage
// record of 256 bytes, so that the unpickler itself is explored. Whatever
// state dict comes out is then mapped onto an RWKV-7 model (the .pth
// mapping: names, shapes, the generation), which must refuse or succeed,
// never crash.
#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "model/checkpoints/rwkv7_checkpoint.h"
#include "model/checkpoints/torch_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  absl::StatusOr<attn::TensorMap> tensors;
  if (data[0] == 0) {
    tensors = attn::ReadTorchCheckpointBytes(rest);
  } else {
    static const std::string storage(256, '\x3f');
    const std::map<std::string, absl::string_view> records = {{"archive/data/0", storage}};
    tensors = attn::ReadStateDictPickle(rest, records, "archive/");
  }
  if (!tensors.ok()) return 0;
  for (const auto& [name, tensor] : *tensors) {
    if (tensor.scalar_type() != torch::kFloat) __builtin_trap();
  }
  if (attn::CheckRwkvVersion(*tensors).ok()) {
    (void)attn::ImportRwkv7(*tensors, attn::Rwkv7Layout::kBlinkDl);
  }
  return 0;
}
