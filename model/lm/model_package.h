// The single-file model package: a TorchScript archive (torch::jit::Module
// saved to *.pt) that opens with torch::jit::load in C++ and torch.jit.load in
// Python. It holds
//
//   parameters and buffers   under the model's own names ("layers.0.mixer.in_proj.weight")
//   attribute "config"       the LmConfig as JSON (a string)
//   attribute "format_version"  kPackageFormatVersion (an int)
//   buffer "tokenizer"       the SentencePiece model as uint8 bytes (may be empty);
//                            a byte buffer, not a string: Python reads strings as UTF-8
//
// Loading rebuilds the model from the config and copies every tensor,
// checking names and shapes both ways. Every failure is a status whose message
// names the file and the problem; none crashes.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "model/lm/language_model.h"

namespace attn {

inline constexpr int64_t kPackageFormatVersion = 1;

struct ModelPackage {
  CausalLm model{nullptr};
  std::string tokenizer_model;  // serialized SentencePiece model; empty if none
};

absl::Status SavePackage(const std::string& path, CausalLm& model,
                         const std::string& tokenizer_model);

// kNotFound for a missing file, kDataLoss for one that is not a readable
// archive (truncated, corrupt), kInvalidArgument for a readable archive whose
// contents do not form a model (bad config, missing or mismatched tensors,
// unknown format version). The model comes back in eval mode on `device`.
absl::StatusOr<ModelPackage> LoadPackage(const std::string& path,
                                         torch::Device device = torch::kCPU);

}  // namespace attn
