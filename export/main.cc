// attn-export: rewrites a model package of any readable format in the
// current one, whose TorchScript methods (forward, init_state, prefill,
// step) run in any LibTorch or PyTorch (docs/model-contract.md).
//
//   attn-export --input=models/aft-conv.pt --output=/tmp/aft-conv.pt
//   attn-export --input=models/aft-decay.pt --output=/tmp/aft-decay-int8.pt --quantize=int8
//
// The weights and tokenizer are copied unchanged, and the result loads to
// the same logits; with --quantize=int8 the dense weights are stored as int8
// with a float scale per output channel (format 3, about a quarter of the
// bytes), and the result loads to the logits `attn-server --quantize=int8`
// serves from the float package. An int8 package stays int8. --output may
// name the input to convert it in place.

#include <filesystem>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "model/lm/model_package.h"
#include "util/flags.h"

ABSL_FLAG(std::string, input, "", "model package to read (*.pt, any readable format)");
ABSL_FLAG(std::string, output, "", "where to write it in the current format (may be --input)");
ABSL_FLAG(std::string, quantize, "none",
          "none: keep the weights as they are; int8: store the dense weights as int8 with a "
          "float scale per output channel");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Rewrites a model package in the current format, with runnable TorchScript methods.");
  attn::ListFlagsOfFolderInHelp(__FILE__);
  absl::ParseCommandLine(argc, argv);
  const std::string input = absl::GetFlag(FLAGS_input), output = absl::GetFlag(FLAGS_output);
  if (input.empty() || output.empty()) {
    std::cerr << "attn-export: give --input=PACKAGE.pt and --output=PACKAGE.pt\n";
    return 2;
  }
  const std::string quantize = absl::GetFlag(FLAGS_quantize);
  if (quantize != "none" && quantize != "int8") {
    std::cerr << "attn-export: --quantize must be none or int8, got \"" << quantize << "\"\n";
    return 2;
  }
  auto package = attn::LoadPackage(input);
  if (!package.ok()) {
    std::cerr << "attn-export: " << package.status().message() << "\n";
    return 1;
  }
  if (quantize == "int8") {
    if (auto bytes = attn::QuantizeInt8(package->model); !bytes.ok()) {
      std::cerr << "attn-export: " << input << ": " << bytes.status().message() << "\n";
      return 1;
    }
  }
  const bool int8 = package->model->has_int8_weights();
  // Written beside the output first, so that converting in place never
  // leaves half a file.
  const std::string partial = output + ".partial";
  if (auto saved = attn::SavePackage(partial, package->model, package->tokenizer_model);
      !saved.ok()) {
    std::cerr << "attn-export: " << saved.message() << "\n";
    return 1;
  }
  std::error_code error;
  std::filesystem::rename(partial, output, error);
  if (error) {
    std::cerr << "attn-export: cannot move " << partial << " to " << output << ": "
              << error.message() << "\n";
    return 1;
  }
  std::cout << "attn-export: wrote " << output << " (format "
            << (int8 ? attn::kInt8PackageFormatVersion : attn::kFloatPackageFormatVersion) << ", "
            << attn::MixerKindName(package->model->config().mixer) << ", "
            << (int8 ? "int8" : "float32") << " weights, "
            << std::filesystem::file_size(output, error) << " bytes)\n";
  return 0;
}
