#include "model/checkpoints/import.h"

#include <openssl/evp.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/checkpoints/hf_checkpoint.h"
#include "model/checkpoints/rwkv7_checkpoint.h"
#include "model/checkpoints/safetensors.h"
#include "model/checkpoints/torch_checkpoint.h"
#include "nlohmann/json.hpp"
#include "util/files.h"

namespace attn {
namespace {

namespace fs = std::filesystem;
constexpr char kVocabularyName[] = "rwkv_vocab_v20230424.txt";

// The sha256 of a file, hex, read in chunks.
absl::StatusOr<std::string> Sha256OfFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  EVP_DigestInit_ex(context, EVP_sha256(), nullptr);
  std::vector<char> chunk(1 << 20);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    EVP_DigestUpdate(context, chunk.data(), static_cast<size_t>(in.gcount()));
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(context, digest, &length);
  EVP_MD_CTX_free(context);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), length));
}

// A torch.save archive has ARCHIVE/data.pkl; a TorchScript one (a package)
// also has code and constants.
bool IsTorchSave(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileBytes(path);
  if (!bytes.ok()) return false;
  return absl::StrContains(*bytes, "/data.pkl") && !absl::StrContains(*bytes, "/constants.pkl");
}

struct Loaded {
  TensorMap tensors;
  Rwkv7Layout layout = Rwkv7Layout::kBlinkDl;
  Rwkv7HfOptions hf;
  std::string format;
  std::vector<std::string> files;  // read, for the record
};

// The tensors of a Hugging Face directory: model.safetensors, a sharded
// model.safetensors.index.json, or pytorch_model.bin (torch.save).
absl::Status ReadDirectoryTensors(const fs::path& dir, Loaded& loaded) {
  const fs::path index = dir / "model.safetensors.index.json", single = dir / "model.safetensors";
  const fs::path bin = dir / "pytorch_model.bin";
  absl::StatusOr<TensorMap> tensors;
  if (fs::exists(index)) {
    tensors = ReadShardedSafetensors(index.string());
    loaded.files.push_back(index.string());
    if (tensors.ok()) {
      for (const auto& entry : fs::directory_iterator(dir)) {
        if (absl::EndsWith(entry.path().string(), ".safetensors")) {
          loaded.files.push_back(entry.path().string());
        }
      }
    }
  } else if (fs::exists(single)) {
    tensors = ReadSafetensors(single.string());
    loaded.files.push_back(single.string());
  } else if (fs::exists(bin)) {
    tensors = ReadTorchCheckpoint(bin.string());
    loaded.files.push_back(bin.string());
  } else {
    return absl::NotFoundError(absl::StrCat(dir.string(),
                                            ": none of model.safetensors, "
                                            "model.safetensors.index.json, pytorch_model.bin"));
  }
  if (!tensors.ok()) return tensors.status();
  loaded.tensors = *std::move(tensors);
  return absl::OkStatus();
}

absl::StatusOr<Loaded> LoadHfDirectory(const fs::path& dir) {
  Loaded loaded;
  loaded.layout = Rwkv7Layout::kHuggingFace;
  loaded.format = "huggingface-rwkv7";
  const fs::path config = dir / "config.json";
  absl::StatusOr<std::string> text = ReadFileBytes(config.string());
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat(dir.string(),
                                            ": no config.json; a Hugging Face "
                                            "directory holds config.json and model.safetensors"));
  }
  absl::StatusOr<Rwkv7HfOptions> options = ParseRwkv7HfConfig(*text);
  if (!options.ok()) return options.status();
  loaded.hf = *options;
  loaded.files.push_back(config.string());
  if (absl::Status read = ReadDirectoryTensors(dir, loaded); !read.ok()) return read;
  return loaded;
}

absl::StatusOr<Loaded> LoadInput(const std::string& input) {
  std::error_code error;
  if (fs::is_directory(input, error)) return LoadHfDirectory(input);
  if (!fs::is_regular_file(input, error)) {
    return absl::NotFoundError(absl::StrCat(input, " does not exist"));
  }
  Loaded loaded;
  loaded.files.push_back(input);
  if (absl::EndsWith(input, ".safetensors")) {
    absl::StatusOr<TensorMap> tensors = ReadSafetensors(input);
    if (!tensors.ok()) return tensors.status();
    loaded.tensors = *std::move(tensors);
    const bool hf = loaded.tensors.count("model.embeddings.weight") > 0;
    loaded.layout = hf ? Rwkv7Layout::kHuggingFace : Rwkv7Layout::kBlinkDl;
    loaded.format = hf ? "safetensors-huggingface-rwkv7" : "safetensors-blinkdl-rwkv7";
    return loaded;
  }
  absl::StatusOr<TensorMap> tensors = ReadTorchCheckpoint(input);
  if (!tensors.ok()) return tensors.status();
  loaded.tensors = *std::move(tensors);
  loaded.format = "blinkdl-pth";
  if (absl::Status version = CheckRwkvVersion(loaded.tensors); !version.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(input, ": ", version.message()));
  }
  return loaded;
}

// The vocabulary to package: the one given, else one in the directory.
absl::StatusOr<std::string> VocabularyPath(const std::string& input, const std::string& given) {
  if (!given.empty()) return given;
  std::error_code error;
  const fs::path beside = fs::path(input) / kVocabularyName;
  if (fs::is_directory(input, error) && fs::exists(beside)) return beside.string();
  return absl::NotFoundError(absl::StrCat(
      "give --tokenizer=", kVocabularyName,
      " (the RWKV World vocabulary the model was trained with); ", input, " does not hold one"));
}

// Where a package came from: the format and each file read with its sha256.
absl::StatusOr<std::string> SourceRecord(const std::string& format, std::vector<std::string> files,
                                         const std::string& tokenizer) {
  nlohmann::json source = {{"format", format}};
  files.push_back(tokenizer);
  for (const std::string& file : files) {
    absl::StatusOr<std::string> digest = Sha256OfFile(file);
    if (!digest.ok()) return digest.status();
    source["files"].push_back({{"name", fs::path(file).filename().string()}, {"sha256", *digest}});
  }
  return source.dump();
}

// What a package records of its origin, and its tokenizer's kind and chat
// format.
struct Origin {
  std::string format;
  std::vector<std::string> files;  // read, besides the tokenizer
  std::string tokenizer_file;
  const char* tokenizer_kind;
  const char* chat_format;
};

// The imported model with its tokenizer and origin; errors about the model
// start with `input`, a vocabulary larger than its embedding is refused.
absl::StatusOr<ImportedModel> Assemble(absl::StatusOr<CausalLm> model, const std::string& input,
                                       const Tokenizer& tokenizer, std::string tokenizer_bytes,
                                       const Origin& from) {
  if (!model.ok()) {
    return absl::Status(model.status().code(), absl::StrCat(input, ": ", model.status().message()));
  }
  if (tokenizer.vocab_size() > (*model)->config().vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(from.tokenizer_file, " has ", tokenizer.vocab_size(),
                     " tokens; the model's embedding has ", (*model)->config().vocab_size));
  }
  absl::StatusOr<std::string> source = SourceRecord(from.format, from.files, from.tokenizer_file);
  if (!source.ok()) return source.status();
  ImportedModel imported;
  imported.model = *std::move(model);
  imported.tokenizer_model = std::move(tokenizer_bytes);
  imported.info.tokenizer_kind = from.tokenizer_kind;
  imported.info.chat_format = from.chat_format;
  imported.info.source_json = *source;
  return imported;
}

// The config.json of a directory that is not RWKV-7's (Mamba-2, RWKV-4, or a
// model_type ParseHfModelSpec refuses by name).
std::optional<nlohmann::json> HfSpecConfig(const std::string& dir) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) return std::nullopt;
  absl::StatusOr<std::string> text = ReadFileBytes((fs::path(dir) / "config.json").string());
  if (!text.ok()) return std::nullopt;
  absl::StatusOr<nlohmann::json> json = ParsePythonJson(*text);
  if (!json.ok()) return std::nullopt;
  auto type = json->find("model_type");
  if (type != json->end() ? *type == "rwkv7" : !IsHfMamba2OrRwkv4(*json)) return std::nullopt;
  return *json;
}

// A Mamba-2 or RWKV-4 directory with its tokenizer.json.
absl::StatusOr<ImportedModel> ImportHfDirectory(const std::string& dir,
                                                const nlohmann::json& config,
                                                const std::string& tokenizer_path) {
  absl::StatusOr<HfModelSpec> spec = ParseHfModelSpec(config);
  if (!spec.ok())
    return absl::InvalidArgumentError(absl::StrCat(dir, "/", spec.status().message()));
  const std::string tokenizer_file =
      tokenizer_path.empty() ? (fs::path(dir) / "tokenizer.json").string() : tokenizer_path;
  absl::StatusOr<std::string> tokenizer_json = ReadFileBytes(tokenizer_file);
  if (!tokenizer_json.ok()) {
    return absl::NotFoundError(
        absl::StrCat(tokenizer_file,
                     " cannot be read; give --tokenizer=tokenizer.json (GPT-NeoX-20B's for "
                     "Mamba-2 and RWKV-4 Pile models)"));
  }
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::FromTokenizerJson(*tokenizer_json);
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(tokenizer_file, ": ", tokenizer.status().message()));
  }
  Loaded loaded;
  loaded.files.push_back((fs::path(dir) / "config.json").string());
  if (absl::Status read = ReadDirectoryTensors(dir, loaded); !read.ok()) return read;
  Origin source{spec->layout, loaded.files, tokenizer_file, "tokenizer-json", "plain"};
  return Assemble(ImportHfModel(*spec, loaded.tensors), dir, *tokenizer, *std::move(tokenizer_json),
                  source);
}

}  // namespace

bool IsCheckpoint(const std::string& path) {
  std::error_code error;
  if (fs::is_directory(path, error)) return true;
  return absl::EndsWith(path, ".safetensors") || IsTorchSave(path);
}

absl::StatusOr<ImportedModel> ImportCheckpoint(const std::string& input,
                                               const std::string& tokenizer_path) {
  if (std::optional<nlohmann::json> config = HfSpecConfig(input)) {
    return ImportHfDirectory(input, *config, tokenizer_path);
  }
  absl::StatusOr<std::string> vocabulary_path = VocabularyPath(input, tokenizer_path);
  if (!vocabulary_path.ok()) return vocabulary_path.status();
  absl::StatusOr<std::string> vocabulary = ReadFileBytes(*vocabulary_path);
  if (!vocabulary.ok()) return absl::NotFoundError(vocabulary.status().message());
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::FromRwkvVocabulary(*vocabulary);
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(*vocabulary_path, ": ", tokenizer.status().message()));
  }
  absl::StatusOr<Loaded> loaded = LoadInput(input);
  if (!loaded.ok()) return loaded.status();
  Origin source{loaded->format, loaded->files, *vocabulary_path, "rwkv-world", "rwkv-world"};
  return Assemble(ImportRwkv7(loaded->tensors, loaded->layout, loaded->hf), input, *tokenizer,
                  *std::move(vocabulary), source);
}

}  // namespace attn
