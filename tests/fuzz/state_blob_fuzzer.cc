// DecodeStateBlob on arbitrary bytes (GenerateRequest.state). The input is
// decoded twice: as it is, and with a valid checksum appended, so that the
// fuzzer explores the parser behind the checksum too. A blob that decodes
// must encode back to bytes that decode to the same blob.
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "model/backend/backend.h"
#include "server/state/state_blob.h"

namespace {

void CheckRoundTrip(const attn::serving::StateBlob& blob) {
  const std::string bytes = attn::serving::EncodeStateBlob(blob);
  auto again = attn::serving::DecodeStateBlob(bytes);
  if (!again.ok() || again->fingerprint != blob.fingerprint || again->tokens != blob.tokens ||
      again->row->tensors.size() != blob.row->tensors.size()) {
    __builtin_trap();
  }
  for (size_t i = 0; i < blob.row->tensors.size(); ++i) {
    const torch::Tensor& a = blob.row->tensors[i];
    const torch::Tensor& b = again->row->tensors[i];
    if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type() ||
        (a.numel() > 0 &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) != 0)) {
      __builtin_trap();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  if (auto blob = attn::serving::DecodeStateBlob(input); blob.ok()) CheckRoundTrip(*blob);
  std::string checked = input;
  const uint64_t checksum = attn::Hash64(input);
  checked.append(reinterpret_cast<const char*>(&checksum), sizeof(checksum));
  if (auto blob = attn::serving::DecodeStateBlob(checked); blob.ok()) CheckRoundTrip(*blob);
  return 0;
}
