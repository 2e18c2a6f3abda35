// The single-file model package: a TorchScript archive (torch::jit::Module
// saved to *.pt) that opens with torch::jit::load in C++ and torch.jit.load in
// Python. It holds
//
//   buffers                  the model's tensors, named as in C++ with '_' for '.'
//                            ("layers_0_mixer_in_proj_weight"; format 1: the C++ names)
//   attribute "config"       JSON (a string): the serving contract's fields
//                            (docs/model-contract.md) and the LmConfig as "lm"
//                            (format 1: the LmConfig alone)
//   attribute "format_version"  kPackageFormatVersion (an int)
//   methods                  forward, init_state, prefill, step
//                            (model/lm/torchscript_methods.h; format 2)
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

// Format 1 stored the weights only; format 2 (written since) adds the
// TorchScript methods (model/lm/torchscript_methods.h) and the serving
// contract's config (docs/model-contract.md). Both load.
inline constexpr int64_t kOldestPackageFormatVersion = 1;
inline constexpr int64_t kPackageFormatVersion = 2;

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
