// attn-export: rewrites a model package of any readable format in the
// current one, whose TorchScript methods (forward, init_state, prefill,
// step) run in any LibTorch or PyTorch (docs/model-contract.md).
//
//   attn-export --input=models/aft-conv.pt --output=/tmp/aft-conv.pt
//
// The weights and tokenizer are copied unchanged; the result loads to the
// same logits. --output may name the input to convert it in place.

#include <filesystem>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "model/lm/model_package.h"
#include "util/flags.h"

ABSL_FLAG(std::string, input, "", "model package to read (*.pt, any readable format)");
ABSL_FLAG(std::string, output, "", "where to write it in the current format (may be --input)");

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
  auto package = attn::LoadPackage(input);
  if (!package.ok()) {
    std::cerr << "attn-export: " << package.status().message() << "\n";
    return 1;
  }
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
  std::cout << "attn-export: wrote " << output << " (format " << attn::kPackageFormatVersion << ", "
            << attn::MixerKindName(package->model->config().mixer) << ")\n";
  return 0;
}
