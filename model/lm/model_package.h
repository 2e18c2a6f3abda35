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
// A model with int8 weights (CausalLmImpl::QuantizeInt8) is saved as format
// 3: each int8 dense weight is an int8 buffer [out, in] under its usual name
// and its float32 scales [out] under Int8ScaleName (torchscript_methods.h),
// about a quarter of the float bytes. It loads with the same int8 weights
// and their dequantised float values, bit for bit, and its TorchScript
// methods dequantise as they read. Float models are still saved as format 2,
// which older builds read.
//
// Loading rebuilds the model from the config and copies every tensor,
// checking names and shapes both ways. Every failure is a status whose message
// names the file and the problem; none crashes.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model/lm/language_model.h"
#include "model/text/tokenizer.h"

namespace attn {

// Format 1 stored the weights only; format 2 (written since for float
// models) adds the TorchScript methods (model/lm/torchscript_methods.h) and
// the serving contract's config (docs/model-contract.md); format 3 (written
// for models with int8 weights) adds int8 buffers. All load.
inline constexpr int64_t kOldestPackageFormatVersion = 1;
inline constexpr int64_t kFloatPackageFormatVersion = 2;
inline constexpr int64_t kInt8PackageFormatVersion = 3;
inline constexpr int64_t kPackageFormatVersion = kInt8PackageFormatVersion;  // the newest

// What a package says of itself besides the model and its tokenizer's
// bytes; all of it in the contract's config JSON (docs/model-contract.md).
struct PackageInfo {
  std::string tokenizer_kind = "sentencepiece";  // Tokenizer::kind() of tokenizer_model
  std::string chat_format = "plain";             // model/text/chat_format.h
  // Where the weights came from, a JSON object (attn-export writes the
  // format, files and their sha256); empty for a model trained here.
  std::string source_json;
  // The model's own chat template (model/text/chat_template.h,
  // ChatTemplateConfig::ToJson); empty: chat_format renders chats.
  std::string chat_template_json;
};

struct ModelPackage {
  CausalLm model{nullptr};
  std::string tokenizer_model;  // the tokenizer's Serialized() bytes; empty if none
  PackageInfo info;
  uint64_t file_hash = 0;  // Hash64 of the package file (LoadPackage's)
};

// Writes `model` as it is: a model with int8 weights as an int8 package
// (format 3), any other as format 2. kInvalidArgument when the tokenizer
// does not load as info.tokenizer_kind, info.chat_format is unknown,
// info.source_json is not a JSON object or info.chat_template_json's
// templates do not parse.
absl::Status SavePackage(const std::string& path, CausalLm& model,
                         const std::string& tokenizer_model, const PackageInfo& info = {});

// The package's tokenizer, as its info says to read it, padded to the
// model's vocabulary (Tokenizer::PadTo).
absl::StatusOr<Tokenizer> PackageTokenizer(const ModelPackage& package);

// kNotFound for a missing file, kDataLoss for one that is not a readable
// archive (truncated, corrupt), kInvalidArgument for a readable archive whose
// contents do not form a model (bad config, missing or mismatched tensors,
// unknown format version). The model comes back in eval mode on `device`;
// from an int8 package, with its int8 weights on the CPU (elsewhere with
// their dequantised float values only).
absl::StatusOr<ModelPackage> LoadPackage(const std::string& path,
                                         torch::Device device = torch::kCPU);

}  // namespace attn
