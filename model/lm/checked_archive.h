// Opening a TorchScript archive (a model package or a TorchScript model)
// whose bytes are checked first. LibTorch checks no CRC, so a damaged file
// could load as other weights; ReadIntactZip checks every entry's CRC-32,
// and LibTorch then reads those same bytes in place.
#pragma once

#include <torch/script.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attn {

struct CheckedArchive {
  torch::jit::Module module;
  // Hash64 (util/hash64.h) of the file's bytes, hashed in the same pass:
  // the server's model fingerprint.
  uint64_t file_hash = 0;
};

// The archive at `path` on `device`. The file is read once into one buffer
// of its size, which is freed as soon as LibTorch holds the tensors: a
// package at the public 1B shapes is 6 GB, and the caller copies its
// tensors next. Errors name `what` ("model package") and the path:
// kNotFound when there is no such file, kDataLoss when it is damaged or
// not a readable archive.
absl::StatusOr<CheckedArchive> LoadCheckedArchive(const std::string& path, torch::Device device,
                                                  absl::string_view what);

}  // namespace attn
