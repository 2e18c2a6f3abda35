// attn-grammar-bench: structured output's grammar engine on MaskBench case
// files (github.com/guidance-ai/jsonschemabench, folder maskbench: a JSON
// Schema and valid and invalid instances per file), without a model.
// Matchers of one schema share what they compute, as a server's requests
// with one schema do: the summary also gives the masks of each schema's
// first instance alone, which start from nothing.
//
// For each case: compile the schema (as a request's response_format
// would), then for each instance serialize it as compact JSON, tokenize it
// with the package's tokenizer, and feed its tokens, checking each is
// allowed by the mask at its step and that the end is allowed after the
// last. Prints one JSON line per case on stdout and MaskBench's summary on
// stderr:
//   passing             compiled, every valid instance accepted and every
//                       invalid one rejected;
//   compile error       the schema was refused;
//   validation error    a valid instance rejected;
//   invalidation error  an invalid instance accepted.
//
//   attn-grammar-bench --model=PACKAGE.pt --cases=DIR_OR_FILE...
//   attn-grammar-bench --tokenizer_json=tokenizer.json --cases=...
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "model/grammar/constraint.h"
#include "model/grammar/matcher.h"
#include "model/lm/continuation.h"
#include "model/lm/model_package.h"
#include "nlohmann/json.hpp"
#include "util/flags.h"

ABSL_FLAG(std::string, model, "", "model package (*.pt) whose tokenizer the instances use");
ABSL_FLAG(std::string, tokenizer_json, "", "instead of --model: a Hugging Face tokenizer.json");
ABSL_FLAG(std::vector<std::string>, cases, {},
          "MaskBench case files (*.json), or folders of them, comma-separated");
ABSL_FLAG(int64_t, limit, 0, "stop after this many cases (0: all)");

namespace attn::grammar {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  const auto k = static_cast<size_t>(q * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

std::vector<std::string> CaseFiles(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& path : paths) {
    if (std::filesystem::is_directory(path)) {
      for (const auto& entry : std::filesystem::directory_iterator(path)) {
        if (entry.path().extension() == ".json") files.push_back(entry.path().string());
      }
    } else {
      files.push_back(path);
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

struct Totals {
  int64_t cases = 0, passing = 0, compile_errors = 0, validation_errors = 0,
          invalidation_errors = 0;
  std::vector<double> compile_us, mask_us;
  std::vector<double> first_mask_us;  // each schema's first instance: nothing computed before
};

// Feeds `tokens`; whether every one was allowed and the end too.
bool Accepts(const std::shared_ptr<const Grammar>& grammar,
             const std::shared_ptr<const TokenTrie>& trie, const std::vector<int64_t>& tokens,
             std::vector<double>* mask_us) {
  GrammarMatcher matcher(grammar, trie);
  for (int64_t id : tokens) {
    const auto start = Clock::now();
    const bool allowed = id < trie->vocab_size() && MaskAllows(matcher.Mask(), id);
    mask_us->push_back(Micros(Clock::now() - start));
    if (!allowed || !matcher.Accept(trie->token(id))) return false;
  }
  return matcher.CanEnd();
}

Json RunCase(const std::string& file, const Tokenizer& tokenizer,
             const std::shared_ptr<const TokenTrie>& trie, Totals* totals) {
  Json out{{"file", std::filesystem::path(file).filename().string()}};
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  const Json c = Json::parse(text.str(), nullptr, false);
  ++totals->cases;
  const auto start = Clock::now();
  auto gbnf = c.is_discarded() ? absl::StatusOr<std::string>(absl::InvalidArgumentError("bad file"))
                               : ConstraintGbnf(OutputConstraint::JsonSchema(c["schema"]));
  absl::StatusOr<Grammar> compiled =
      gbnf.ok() ? Grammar::FromGbnf(*gbnf) : absl::StatusOr<Grammar>(gbnf.status());
  const double compile_us = Micros(Clock::now() - start);
  out["compile_us"] = compile_us;
  out["compiled"] = compiled.ok();
  if (!compiled.ok()) {
    ++totals->compile_errors;
    out["error"] = std::string(compiled.status().message());
    return out;
  }
  totals->compile_us.push_back(compile_us);
  auto grammar = std::make_shared<const Grammar>(*std::move(compiled));
  std::vector<double> masks;
  bool validation_error = false, invalidation_error = false;
  out["tests"] = Json::array();
  bool first = true;
  for (const auto& test : c.value("tests", Json::array())) {
    const bool valid = test.value("valid", false);
    const size_t before = masks.size();
    const bool accepted = Accepts(grammar, trie, tokenizer.Encode(test["data"].dump()), &masks);
    if (first) {
      totals->first_mask_us.insert(totals->first_mask_us.end(), masks.begin() + before,
                                   masks.end());
      first = false;
    }
    out["tests"].push_back({{"valid", valid}, {"accepted", accepted}});
    validation_error |= valid && !accepted;
    invalidation_error |= !valid && accepted;
  }
  totals->validation_errors += validation_error;
  totals->invalidation_errors += invalidation_error;
  totals->passing += !validation_error && !invalidation_error;
  out["mask_us"] = {{"count", masks.size()},
                    {"p50", Percentile(masks, 0.5)},
                    {"p99", Percentile(masks, 0.99)},
                    {"max", masks.empty() ? 0.0 : *std::max_element(masks.begin(), masks.end())}};
  totals->mask_us.insert(totals->mask_us.end(), masks.begin(), masks.end());
  return out;
}

void PrintSummary(const Totals& t) {
  std::cerr << "cases " << t.cases << "\n"
            << "passing " << t.passing << "\n"
            << "compile error " << t.compile_errors << "\n"
            << "validation error " << t.validation_errors << "\n"
            << "invalidation error " << t.invalidation_errors << "\n"
            << "masks " << t.mask_us.size() << ": p50 " << Percentile(t.mask_us, 0.5) << " us, p75 "
            << Percentile(t.mask_us, 0.75) << " us, p99 " << Percentile(t.mask_us, 0.99)
            << " us, max "
            << (t.mask_us.empty() ? 0.0 : *std::max_element(t.mask_us.begin(), t.mask_us.end()))
            << " us\n"
            << "masks of each schema's first instance " << t.first_mask_us.size() << ": p50 "
            << Percentile(t.first_mask_us, 0.5) << " us, p99 " << Percentile(t.first_mask_us, 0.99)
            << " us\n"
            << "compile: p50 " << Percentile(t.compile_us, 0.5) / 1000 << " ms, p75 "
            << Percentile(t.compile_us, 0.75) / 1000 << " ms, p99 "
            << Percentile(t.compile_us, 0.99) / 1000 << " ms\n";
}

absl::StatusOr<Tokenizer> LoadTokenizer() {
  if (!absl::GetFlag(FLAGS_tokenizer_json).empty()) {
    std::ifstream in(absl::GetFlag(FLAGS_tokenizer_json));
    if (!in) return absl::NotFoundError("--tokenizer_json: cannot read the file");
    std::stringstream text;
    text << in.rdbuf();
    return Tokenizer::FromTokenizerJson(text.str());
  }
  auto package = LoadPackage(absl::GetFlag(FLAGS_model));
  if (!package.ok()) return package.status();
  return PackageTokenizer(*package);
}

int Main() {
  auto tokenizer = LoadTokenizer();
  if (!tokenizer.ok()) {
    std::cerr << "attn-grammar-bench: " << tokenizer.status().message() << "\n";
    return 1;
  }
  const auto files = CaseFiles(absl::GetFlag(FLAGS_cases));
  if (files.empty()) {
    std::cerr << "attn-grammar-bench: no case files; pass --cases=DIR_OR_FILE\n";
    return 1;
  }
  auto trie = GrammarVocabulary(*tokenizer);
  std::cerr << "vocabulary " << trie->vocab_size() << " tokens, " << files.size() << " cases\n";
  Totals totals;
  const int64_t limit = absl::GetFlag(FLAGS_limit);
  for (const auto& file : files) {
    if (limit > 0 && totals.cases >= limit) break;
    std::cout << RunCase(file, *tokenizer, trie, &totals).dump() << "\n";
    if (totals.cases % 500 == 0) std::cerr << totals.cases << " cases done\n";
  }
  PrintSummary(totals);
  return 0;
}

}  // namespace
}  // namespace attn::grammar

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Runs MaskBench case files through the structured-output grammar engine.");
  attn::ListFlagsOfFolderInHelp(__FILE__);
  absl::ParseCommandLine(argc, argv);
  return attn::grammar::Main();
}
