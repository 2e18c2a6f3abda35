// attn-generate: streams a completion of a prompt from a model package to
// the terminal, using prefill and step.
//
//   attn-generate --model=models/aft-conv.pt --prompt="The river" --max_tokens=100

#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "model/lm/generation.h"
#include "model/lm/model_package.h"
#include "util/cpus.h"
#include "util/flags.h"

ABSL_FLAG(std::string, model, "", "model package (*.pt)");
ABSL_FLAG(std::string, prompt, "", "text to continue");
ABSL_FLAG(int64_t, max_tokens, attn::GenerationOptions().max_tokens, "tokens to generate at most");
ABSL_FLAG(double, temperature, 0.8, "sampling temperature; 0 is greedy");
ABSL_FLAG(int64_t, top_k, 0, "keep the k most likely tokens (0: all)");
ABSL_FLAG(double, top_p, 0.95, "keep the most likely tokens up to this probability");
ABSL_FLAG(double, repetition_penalty, 1.0, "penalty for tokens already present (1: none)");
ABSL_FLAG(uint64_t, seed, 0, "sampling seed");
ABSL_FLAG(int, threads, 0,
          "intra-op threads (0: the CPUs this process may use, cgroup quota included)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Streams a completion of --prompt from a model package.");
  attn::ListFlagsOfFolderInHelp(__FILE__);
  absl::ParseCommandLine(argc, argv);
  attn::ConfigureThreads(absl::GetFlag(FLAGS_threads));
  auto package = attn::LoadPackage(absl::GetFlag(FLAGS_model));
  if (!package.ok()) {
    std::cerr << "attn-generate: " << package.status().message() << "\n";
    return 1;
  }
  auto tokenizer = attn::PackageTokenizer(*package);
  if (!tokenizer.ok()) {
    std::cerr << "attn-generate: " << tokenizer.status().message() << "\n";
    return 1;
  }
  attn::GenerationOptions options;
  options.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  options.sampling.temperature = absl::GetFlag(FLAGS_temperature);
  options.sampling.top_k = absl::GetFlag(FLAGS_top_k);
  options.sampling.top_p = absl::GetFlag(FLAGS_top_p);
  options.sampling.repetition_penalty = absl::GetFlag(FLAGS_repetition_penalty);
  options.sampling.seed = absl::GetFlag(FLAGS_seed);
  const std::string prompt = absl::GetFlag(FLAGS_prompt);
  std::cout << prompt << std::flush;
  auto result = attn::Generate(
      package->model, *tokenizer, tokenizer->Encode(prompt), options,
      [](const attn::GeneratedPiece& piece) { std::cout << piece.text << std::flush; });
  std::cout << "\n";
  if (!result.ok()) {
    std::cerr << "attn-generate: " << result.status().message() << "\n";
    return 1;
  }
  return 0;
}
