// Reading the tensors of a checkpoint written by torch.save (a zip archive:
// ARCHIVE/data.pkl, a pickle of the state dict, and ARCHIVE/data/KEY, each
// storage's raw little-endian bytes) without running its pickle. The
// unpickler here knows only what a state dict needs: dicts (OrderedDict
// too), lists, tuples, strings, numbers, and the two calls that rebuild a
// tensor from a storage (torch._utils._rebuild_tensor_v2 and
// _rebuild_parameter). Any other global a pickle names is refused by name,
// so a checkpoint can never run code here (unlike torch.load of a pickle).
#pragma once

#include <torch/types.h>

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attn {

// A checkpoint's tensors by name, each float32 or as stored (the caller
// converts); order by name.
using TensorMap = std::map<std::string, torch::Tensor>;

// The state dict in the torch.save archive held in `archive`. kDataLoss for
// a damaged archive (CRC, truncation) or a missing storage record;
// kInvalidArgument for a pickle that is not a state dict of tensors (naming
// the opcode, global or key), a storage type other than float32, float16
// and bfloat16, or a tensor that reaches past its storage.
absl::StatusOr<TensorMap> ReadTorchCheckpointBytes(absl::string_view archive);

// The unpickler alone: the state dict `pickle` describes, its storages read
// from `records` under `prefix` ("ARCHIVE/": "ARCHIVE/data/KEY"). What
// ReadTorchCheckpointBytes runs once the archive is intact (and what the
// fuzzer drives directly, past the archive's checksums).
absl::StatusOr<TensorMap> ReadStateDictPickle(
    absl::string_view pickle, const std::map<std::string, absl::string_view>& records,
    const std::string& prefix);

// The same for the file at `path`; messages start with the path.
absl::StatusOr<TensorMap> ReadTorchCheckpoint(const std::string& path);

}  // namespace attn
