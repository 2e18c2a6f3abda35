#include "model/lm/model_package.h"

#include <torch/script.h>
#include <torch/torch.h>

#include <exception>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/layers/dense.h"
#include "model/lm/checked_archive.h"
#include "model/lm/torchscript_methods.h"
#include "model/text/chat_format.h"
#include "model/text/chat_template.h"
#include "model/text/tokenizer.h"
#include "nlohmann/json.hpp"

namespace attn {
namespace {

// The model's tensors by name: parameters and buffers alike.
std::map<std::string, torch::Tensor> NamedTensors(torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& p : module.named_parameters()) tensors[p.key()] = p.value();
  for (const auto& b : module.named_buffers()) tensors[b.key()] = b.value();
  return tensors;
}

std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

absl::Status Invalid(const std::string& path, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat("model package ", path, ": ", problem));
}

std::string ShapeString(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

absl::StatusOr<std::string> ContractConfig(const CausalLm& model,
                                           const std::string& tokenizer_model,
                                           const PackageInfo& info) {
  int64_t eos_id = -1;
  if (!tokenizer_model.empty()) {
    auto tokenizer = Tokenizer::FromStored(info.tokenizer_kind, tokenizer_model);
    if (!tokenizer.ok()) return tokenizer.status();
    eos_id = tokenizer->eos_id();
  }
  ChatFormat chat;
  if (!ParseChatFormat(info.chat_format, &chat)) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat_format: \"", info.chat_format, "\" is not a chat format"));
  }
  const LmConfig& config = model->config();
  const int64_t max_context = model->max_context();
  nlohmann::json json;
  json["vocab_size"] = config.vocab_size;
  json["eos_id"] = eos_id;
  json["max_context"] = max_context > 0 ? nlohmann::json(max_context) : nlohmann::json(nullptr);
  // A cache at its longest; constant for the recurrent kinds (any context
  // past their window costs the same).
  json["state_bytes_per_sequence"] =
      model->state_bytes_per_sequence(max_context > 0 ? max_context : int64_t{1} << 30);
  json["tokenizer"] = tokenizer_model.empty() ? "none" : info.tokenizer_kind;
  json["chat_format"] = info.chat_format;
  if (!info.source_json.empty()) {
    auto source = nlohmann::json::parse(info.source_json, nullptr, /*allow_exceptions=*/false);
    if (source.is_discarded() || !source.is_object()) {
      return absl::InvalidArgumentError("source: not a JSON object");
    }
    json["source"] = source;
  }
  if (!info.chat_template_json.empty()) {
    absl::StatusOr<ChatTemplateConfig> chat = ChatTemplateConfig::FromJson(info.chat_template_json);
    if (!chat.ok()) return chat.status();
    json["chat_template"] = nlohmann::json::parse(info.chat_template_json);
  }
  json["lm"] = nlohmann::json::parse(config.ToJson());
  return json.dump();
}

// The package's own facts in a format 2 or 3 contract config (PackageInfo);
// a package written before they existed has SentencePiece and plain chat.
PackageInfo InfoOf(const std::string& config) {
  PackageInfo info;
  auto json = nlohmann::json::parse(config, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) return info;
  if (json.contains("tokenizer") && json["tokenizer"].is_string() && json["tokenizer"] != "none") {
    info.tokenizer_kind = json["tokenizer"].get<std::string>();
  }
  if (json.contains("chat_format") && json["chat_format"].is_string()) {
    info.chat_format = json["chat_format"].get<std::string>();
  }
  if (json.contains("source") && json["source"].is_object())
    info.source_json = json["source"].dump();
  if (json.contains("chat_template") && json["chat_template"].is_object()) {
    info.chat_template_json = json["chat_template"].dump();
  }
  return info;
}

// The LmConfig of a package: all of `config` in format 1, its "lm" member
// in format 2 (whose `config` is the serving contract's, docs/model-contract.md).
absl::StatusOr<LmConfig> NativeConfig(const std::string& config, int64_t version) {
  if (version == 1) return LmConfig::FromJson(config);
  auto json = nlohmann::json::parse(config, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError("not a JSON object");
  }
  if (!json.contains("lm")) {
    return absl::InvalidArgumentError(
        "no \"lm\" member: not one of this library's models; serve it with "
        "--backend=torchscript");
  }
  return LmConfig::FromJson(json["lm"].dump());
}

// Refuses a config that describes a model far larger than the tensors the
// archive holds (every value of the model is copied from one of them) before
// anything is allocated: building the model first would let a few bytes of
// config claim terabytes. A small disagreement passes, to be named tensor by
// tensor by the shape checks, whose messages say more; the slack (twice the
// archive plus a million values) bounds what a bad config can allocate.
absl::Status CheckSize(const LmConfig& config, const std::map<std::string, torch::Tensor>& stored) {
  double held = 0;
  for (const auto& [name, tensor] : stored) held += static_cast<double>(tensor.numel());
  const double needed = MinimumTensorElements(config);
  if (needed <= 2 * held + (1 << 20)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "config describes a model of at least %.0f values, the archive's tensors hold %.0f", needed,
      held));
}

// The int8 values stored for the model tensor `name` (archive name
// `script_name`) and their scales, which it takes out of `stored`. Only a
// format-3 package holds int8 tensors, and only for float matrices that are
// parameters (what QuantizeInt8 quantises); the scales must be float32 [out],
// finite and not negative, or the dequantised weights would be garbage.
absl::StatusOr<Int8Matrix> TakeInt8(
    const std::string& name, const std::string& script_name, int64_t version,
    const torch::OrderedDict<std::string, torch::Tensor>& parameters,
    std::map<std::string, torch::Tensor>& stored) {
  if (version < kInt8PackageFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " is int8, which only format ",
                                                   kInt8PackageFormatVersion, " stores"));
  }
  const torch::Tensor* parameter = parameters.find(name);
  if (parameter == nullptr || parameter->dim() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, " is int8; only the dense weights may be"));
  }
  auto scales = stored.find(Int8ScaleName(script_name));
  if (scales == stored.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("int8 tensor ", name, " has no scales (", Int8ScaleName(script_name), ")"));
  }
  const torch::Tensor& s = scales->second;
  if (s.scalar_type() != torch::kFloat || s.dim() != 1 || s.size(0) != parameter->size(0) ||
      !torch::isfinite(s).all().item<bool>() || (s < 0).any().item<bool>()) {
    return absl::InvalidArgumentError(
        absl::StrCat("scales ", scales->first, " must be ", parameter->size(0),
                     " finite, non-negative float32 values, one per output channel of ", name));
  }
  Int8Matrix matrix{stored[script_name], s};
  stored.erase(scales);
  return matrix;
}

}  // namespace

absl::Status SavePackage(const std::string& path, CausalLm& model,
                         const std::string& tokenizer_model, const PackageInfo& info) {
  auto config = ContractConfig(model, tokenizer_model, info);
  if (!config.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write model package ", path, ": ", config.status().message()));
  }
  try {
    torch::jit::Module archive("attn_model_package");
    std::vector<std::string> int8_names;
    for (const auto& [name, tensor] : NamedTensors(*model)) {
      const std::string script_name = ScriptTensorName(name);
      if (auto int8 = Int8CopyOf(tensor)) {
        archive.register_buffer(script_name, int8->values);
        archive.register_buffer(Int8ScaleName(script_name), int8->scales);
        int8_names.push_back(script_name);
      } else {
        archive.register_buffer(script_name, tensor.detach().to(torch::kCPU).contiguous());
      }
    }
    auto bytes = torch::empty({static_cast<int64_t>(tokenizer_model.size())}, torch::kUInt8);
    if (!tokenizer_model.empty()) {  // an empty tensor has no data to copy into
      std::memcpy(bytes.data_ptr<uint8_t>(), tokenizer_model.data(), tokenizer_model.size());
    }
    archive.register_buffer("tokenizer", bytes);
    archive.register_attribute("config", c10::StringType::get(), *config);
    archive.register_attribute(
        "format_version", c10::IntType::get(),
        int8_names.empty() ? kFloatPackageFormatVersion : kInt8PackageFormatVersion);
    if (HasTorchScriptMethods(model->config())) {
      DefineTorchScriptMethods(archive, model->config(), int8_names);
    }
    archive.save(path);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("cannot write model package ", path, ": ", FirstLine(e.what())));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelPackage> LoadPackage(const std::string& path, torch::Device device) {
  absl::StatusOr<CheckedArchive> loaded = LoadCheckedArchive(path, torch::kCPU, "model package");
  if (!loaded.ok()) return loaded.status();
  torch::jit::Module& archive = loaded->module;
  if (!archive.hasattr("format_version") || !archive.attr("format_version").isInt()) {
    return Invalid(path,
                   "no format_version: not a package of this library (a TorchScript model that "
                   "keeps docs/model-contract.md is served with --backend=torchscript)");
  }
  const int64_t version = archive.attr("format_version").toInt();
  if (version < kOldestPackageFormatVersion || version > kPackageFormatVersion) {
    return Invalid(path, absl::StrCat("format version ", version, "; this build reads versions ",
                                      kOldestPackageFormatVersion, " to ", kPackageFormatVersion));
  }
  if (!archive.hasattr("config") || !archive.attr("config").isString()) {
    return Invalid(path, "no config");
  }
  auto config = NativeConfig(archive.attr("config").toStringRef(), version);
  if (!config.ok()) return Invalid(path, absl::StrCat("config: ", config.status().message()));

  std::map<std::string, torch::Tensor> stored;
  for (const auto& b : archive.named_buffers(/*recurse=*/false)) stored[b.name] = b.value;
  ModelPackage package;
  package.file_hash = loaded->file_hash;
  if (version > 1) package.info = InfoOf(archive.attr("config").toStringRef());
  auto tokenizer = stored.find("tokenizer");
  if (tokenizer == stored.end() || tokenizer->second.scalar_type() != torch::kUInt8) {
    return Invalid(path, "no tokenizer buffer");
  }
  const auto& bytes = tokenizer->second;
  if (bytes.numel() > 0) {
    package.tokenizer_model.assign(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                                   bytes.numel());
  }
  stored.erase(tokenizer);
  if (auto fits = CheckSize(*config, stored); !fits.ok())
    return Invalid(path, std::string(fits.message()));

  try {
    package.model = CausalLm(*config);
    torch::NoGradGuard no_grad;
    auto expected = NamedTensors(*package.model);
    const auto parameters = package.model->named_parameters();
    std::map<std::string, Int8Matrix> int8;
    for (auto& [name, tensor] : expected) {
      auto found = stored.find(version == 1 ? name : ScriptTensorName(name));
      if (found == stored.end()) return Invalid(path, absl::StrCat("missing tensor ", name));
      if (found->second.sizes() != tensor.sizes()) {
        return Invalid(path,
                       absl::StrCat("tensor ", name, " has shape ", ShapeString(found->second),
                                    ", the config needs ", ShapeString(tensor)));
      }
      if (found->second.scalar_type() == torch::kChar) {
        auto matrix = TakeInt8(name, found->first, version, parameters, stored);
        if (!matrix.ok()) return Invalid(path, std::string(matrix.status().message()));
        tensor.copy_(matrix->values.to(torch::kFloat) * matrix->scales.unsqueeze(1));
        int8.emplace(name, *std::move(matrix));
      } else {
        tensor.copy_(found->second);
      }
      stored.erase(found);
    }
    if (!stored.empty()) {
      return Invalid(path, absl::StrCat("tensor ", stored.begin()->first,
                                        " is not part of a model with this config"));
    }
    package.model->to(device);
    package.model->eval();
    if (device.is_cpu()) {                             // the int8 product is a CPU kernel
      auto moved = package.model->named_parameters();  // to() may have replaced them
      for (const auto& [name, matrix] : int8) SetInt8Copy(moved[name], matrix);
      if (!int8.empty()) package.model->ChooseRowGroups();
    }
  } catch (const std::exception& e) {
    return Invalid(path, FirstLine(e.what()));
  }
  return package;
}

absl::StatusOr<Tokenizer> PackageTokenizer(const ModelPackage& package) {
  absl::StatusOr<Tokenizer> tokenizer =
      Tokenizer::FromStored(package.info.tokenizer_kind, package.tokenizer_model);
  if (tokenizer.ok() && package.model) tokenizer->PadTo(package.model->config().vocab_size);
  return tokenizer;
}

}  // namespace attn
