// attn-tokenize-json: a tokenizer.json's encoding and decoding as this
// project computes them (model/text/tokenizer_json.h), for comparison with
// an independent implementation (tests/text/tokenizer_json_agrees.sh).
//
//   attn-tokenize-json TOKENIZER_JSON CASES      CASES: one hex-encoded text per line;
//                                                prints {"ids": [...], "text": "...",
//                                                "with_special": [...], "kept": "..."} per
//                                                line: the ids, their decoding, the ids with
//                                                the post-processor's special tokens, and
//                                                those decoded keeping special tokens' text
//   attn-tokenize-json TOKENIZER_JSON --bench FILE [REPEATS]
//                                                encodes FILE's lines, prints MB/s (median of 5)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "model/text/tokenizer.h"
#include "nlohmann/json.hpp"

namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

int Bench(const attn::Tokenizer& tokenizer, const std::string& file, int repeats) {
  const std::vector<std::string> lines = Lines(ReadAll(file));
  size_t bytes = 0, tokens = 0;
  for (const auto& line : lines) bytes += line.size();
  std::vector<double> rates;
  for (int run = 0; run < 5; ++run) {
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < repeats; ++r) {
      for (const auto& line : lines) tokens += tokenizer.Encode(line).size();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rates.push_back(static_cast<double>(bytes) * repeats / seconds / 1e6);
  }
  std::sort(rates.begin(), rates.end());
  std::printf("{\"mb_per_s\": %.3f, \"bytes\": %zu, \"tokens\": %zu}\n", rates[2], bytes,
              tokens / (5 * static_cast<size_t>(repeats)));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: attn-tokenize-json TOKENIZER_JSON CASES | --bench FILE [REPEATS]\n";
    return 2;
  }
  auto tokenizer = attn::Tokenizer::FromTokenizerJson(ReadAll(argv[1]));
  if (!tokenizer.ok()) {
    std::cerr << argv[1] << ": " << tokenizer.status() << "\n";
    return 1;
  }
  if (std::string(argv[2]) == "--bench" && argc >= 4) {
    return Bench(*tokenizer, argv[3], argc >= 5 ? std::atoi(argv[4]) : 1);
  }
  for (const std::string& hex : Lines(ReadAll(argv[2]))) {
    const std::vector<int64_t> ids = tokenizer->Encode(absl::HexStringToBytes(hex));
    nlohmann::json out = {{"ids", ids}};
    out["text"] = tokenizer->Decode(ids);
    out["with_special"] = tokenizer->Encode(absl::HexStringToBytes(hex), true);
    // The ids with the special tokens' text kept (what /detokenize returns).
    out["kept"] = tokenizer->Decode(out["with_special"].get<std::vector<int64_t>>(), true);
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 0;
}
