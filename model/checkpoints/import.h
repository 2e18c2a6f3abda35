// Turning a downloaded checkpoint into a model package's contents: the one
// entry point attn-export calls for anything that is not already a package.
//
//   a Hugging Face directory          config.json, whose model_type chooses
//                                     the architecture (hf_registry.h: RWKV-7,
//                                     Mamba-2, RWKV-4), and model.safetensors,
//                                     a sharded model.safetensors.index.json
//                                     or pytorch_model.bin;
//   a BlinkDL .pth (torch.save)       RWKV-7; the version is read from the
//                                     names (RWKV-4, -5, -6 are refused by
//                                     name);
//   a .safetensors file               RWKV-7 in either layout's names.
//
// The tokenizer is the one the architecture ships: an RWKV World file
// (rwkv_vocab_v20230424.txt's format) for RWKV-7, tokenizer.json for the
// others; the one given, else the one of that name in the directory. The
// package records where it came from: the format and each file with its
// sha256 (PackageInfo::source_json).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "model/lm/model_package.h"

namespace attn {

struct ImportedModel {
  CausalLm model{nullptr};
  std::string tokenizer_model;  // the tokenizer file's bytes
  PackageInfo info;             // the tokenizer's kind, the chat format, the source
};

// Whether `path` is a checkpoint ImportCheckpoint reads rather than a model
// package of this project (a TorchScript archive): a directory, a
// .safetensors file, or a torch.save archive.
bool IsCheckpoint(const std::string& path);

// kNotFound for a missing input or vocabulary; kDataLoss for a truncated or
// damaged file; kInvalidArgument naming the tensor, option or line that
// does not fit (docs/rwkv7.md lists what is read).
absl::StatusOr<ImportedModel> ImportCheckpoint(const std::string& input,
                                               const std::string& tokenizer_path);

}  // namespace attn
