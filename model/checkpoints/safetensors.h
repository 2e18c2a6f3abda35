// Reading safetensors files (Hugging Face's weight format): an 8-byte
// little-endian header length N, N bytes of JSON naming each tensor's dtype,
// shape and [begin, end) byte offsets into the data that follows, then the
// data. The header is parsed with nlohmann-json and every offset is bounded
// by the file's size before a byte is read; F32, F16 and BF16 tensors load,
// converted to float32. A sharded checkpoint's model.safetensors.index.json
// (a "weight_map" from tensor name to shard file) reads each shard.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/checkpoints/torch_checkpoint.h"

namespace attn {

// The tensors of one safetensors file held in `bytes`, float32. kDataLoss
// for a file shorter than its header or offsets say (truncated);
// kInvalidArgument naming the tensor for a malformed header entry, a dtype
// other than F32, F16 and BF16, or a shape whose size disagrees with its
// offsets. `metadata` (may be null) receives the header's __metadata__.
absl::StatusOr<TensorMap> ReadSafetensorsBytes(
    absl::string_view bytes, std::map<std::string, std::string>* metadata = nullptr);

// The same for the file at `path` (mapped, not copied); messages start with
// the path.
absl::StatusOr<TensorMap> ReadSafetensors(const std::string& path);

// Every tensor of a sharded checkpoint: `index_path` is its
// model.safetensors.index.json, whose weight_map names each tensor's shard
// (in the same directory). kInvalidArgument when a tensor is not in the
// shard the map names, or a shard holds one the map does not.
absl::StatusOr<TensorMap> ReadShardedSafetensors(const std::string& index_path);

}  // namespace attn
