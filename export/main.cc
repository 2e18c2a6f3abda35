// attn-export: writes a model package in the current format, whose
// TorchScript methods (forward, init_state, prefill, step) run in any
// LibTorch or PyTorch (docs/model-contract.md), from
//
//   a package of any readable format (the weights and tokenizer copied
//   unchanged: the result loads to the same logits), or
//   a public RWKV-7 checkpoint: BlinkDL's .pth or a Hugging Face directory
//   (model/checkpoints/import.h), with its RWKV World vocabulary, or
//   a Hugging Face Mamba-2, RWKV-4, LFM2 or Granite 4.0-H directory with its
//   tokenizer.json (model/checkpoints/hf_checkpoint.h).
//
//   attn-export --input=models/aft-conv.pt --output=/tmp/aft-conv.pt
//   attn-export --input=rwkv7-g1-0.1b.pth --tokenizer=rwkv_vocab_v20230424.txt --output=g1.pt
//   attn-export --input=mamba2-130m --tokenizer=tokenizer.json --output=mamba2-130m.pt
//   attn-export --input=models/aft-decay.pt --output=/tmp/aft-decay-int8.pt --quantize=int8
//
// With --quantize=int8 the dense weights are stored as int8 with a float
// scale per output channel (format 3, about a quarter of the bytes), and the
// result loads to the logits `attn-server --quantize=int8` serves from the
// float package. An int8 package stays int8. --output may name the input to
// convert it in place.

#include <filesystem>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "model/checkpoints/import.h"
#include "model/lm/model_package.h"
#include "model/text/chat_template.h"
#include "util/flags.h"

ABSL_FLAG(std::string, input, "",
          "a model package (*.pt, any readable format), an RWKV-7 .pth, or a Hugging Face "
          "directory (config.json and model.safetensors, sharded or not, or pytorch_model.bin) "
          "of an RWKV-7, RWKV-4, Mamba-2, LFM2 or Granite 4.0-H model");
ABSL_FLAG(std::string, output, "", "where to write the package (may be --input)");
ABSL_FLAG(std::string, tokenizer, "",
          "the vocabulary of a checkpoint: RWKV-7's RWKV World file "
          "(rwkv_vocab_v20230424.txt), or the tokenizer.json of a Hugging Face model; a "
          "Hugging Face directory's own is used when this is empty");
ABSL_FLAG(std::string, chat_template, "",
          "a Jinja chat template file to record instead of the model's own (chat_template.jinja "
          "or tokenizer_config.json's chat_template beside the tokenizer)");
ABSL_FLAG(std::string, quantize, "none",
          "none: keep the weights as they are; int8: store the dense weights as int8 with a "
          "float scale per output channel");

namespace {

int Fail(const std::string& message) {
  std::cerr << "attn-export: " << message << "\n";
  return 1;
}

// The package's contents from --input: a package as it is, or a checkpoint
// imported.
absl::StatusOr<attn::ModelPackage> Read(const std::string& input) {
  if (!attn::IsCheckpoint(input)) return attn::LoadPackage(input);
  std::cerr << "attn-export: reading the checkpoint " << input << "\n";
  absl::StatusOr<attn::ImportedModel> imported =
      attn::ImportCheckpoint(input, absl::GetFlag(FLAGS_tokenizer));
  if (!imported.ok()) return imported.status();
  attn::ModelPackage package;
  package.model = imported->model;
  package.tokenizer_model = std::move(imported->tokenizer_model);
  package.info = std::move(imported->info);
  return package;
}

// Records the chat template: --chat_template's file, else the one beside
// the tokenizer of a checkpoint (model/text/chat_template.h). A package
// keeps its own unless --chat_template replaces it.
absl::Status RecordChatTemplate(const std::string& input, attn::ModelPackage* package) {
  namespace fs = std::filesystem;
  const std::string override_file = absl::GetFlag(FLAGS_chat_template);
  const std::string tokenizer = absl::GetFlag(FLAGS_tokenizer);
  std::error_code error;
  absl::StatusOr<attn::ChatTemplateConfig> config;
  if (!attn::IsCheckpoint(input)) {
    if (override_file.empty()) return absl::OkStatus();
    attn::ChatTemplateConfig own;
    if (!package->info.chat_template_json.empty()) {
      auto parsed = attn::ChatTemplateConfig::FromJson(package->info.chat_template_json);
      if (parsed.ok()) own = *std::move(parsed);
    }
    config = attn::OverrideChatTemplate(std::move(own), override_file);
  } else {
    const std::string dir = !tokenizer.empty() ? fs::path(tokenizer).parent_path().string()
                            : fs::is_directory(input, error) ? input
                                                             : "";
    config = attn::ReadChatTemplate(dir, override_file);
  }
  if (!config.ok()) return config.status();
  if (config->empty()) return absl::OkStatus();
  package->info.chat_template_json = config->ToJson();
  if (!config->templates.empty()) {
    absl::StatusOr<std::shared_ptr<const attn::ChatTemplate>> chat =
        attn::ChatTemplate::Create(*config);
    if (!chat.ok()) return chat.status();
    const std::string& format = (*chat)->tool_call_format();
    std::cerr << "attn-export: chat template from " << config->source
              << (format.empty() ? "" : ", tool calls in the " + format + " format") << "\n";
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Writes a model package in the current format, with runnable TorchScript methods, from a "
      "package or a public RWKV-7 checkpoint.");
  attn::ListFlagsOfFolderInHelp(__FILE__);
  absl::ParseCommandLine(argc, argv);
  const std::string input = absl::GetFlag(FLAGS_input), output = absl::GetFlag(FLAGS_output);
  if (input.empty() || output.empty()) {
    std::cerr << "attn-export: give --input=PACKAGE.pt|CHECKPOINT and --output=PACKAGE.pt\n";
    return 2;
  }
  const std::string quantize = absl::GetFlag(FLAGS_quantize);
  if (quantize != "none" && quantize != "int8") {
    std::cerr << "attn-export: --quantize must be none or int8, got \"" << quantize << "\"\n";
    return 2;
  }
  absl::StatusOr<attn::ModelPackage> package = Read(input);
  if (!package.ok()) return Fail(std::string(package.status().message()));
  if (absl::Status chat = RecordChatTemplate(input, &*package); !chat.ok()) {
    return Fail(std::string(chat.message()));
  }
  if (quantize == "int8") {
    if (auto bytes = attn::QuantizeInt8(package->model); !bytes.ok()) {
      return Fail(input + ": " + std::string(bytes.status().message()));
    }
  }
  const bool int8 = package->model->has_int8_weights();
  // Written beside the output first, so that converting in place never
  // leaves half a file.
  const std::string partial = output + ".partial";
  if (auto saved =
          attn::SavePackage(partial, package->model, package->tokenizer_model, package->info);
      !saved.ok()) {
    return Fail(std::string(saved.message()));
  }
  std::error_code error;
  std::filesystem::rename(partial, output, error);
  if (error) return Fail("cannot move " + partial + " to " + output + ": " + error.message());
  std::cout << "attn-export: wrote " << output << " (format "
            << (int8 ? attn::kInt8PackageFormatVersion : attn::kFloatPackageFormatVersion) << ", "
            << attn::MixerKindName(package->model->config().mixer) << ", "
            << package->model->parameter_count() << " parameters, " << (int8 ? "int8" : "float32")
            << " weights, " << std::filesystem::file_size(output, error) << " bytes)\n";
  return 0;
}
