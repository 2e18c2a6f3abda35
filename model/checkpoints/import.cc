#include "model/checkpoints/import.h"

#include <openssl/evp.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/checkpoints/hf_registry.h"
#include "model/checkpoints/rwkv7_checkpoint.h"
#include "model/checkpoints/safetensors.h"
#include "model/checkpoints/torch_checkpoint.h"
#include "model/text/tokenizer.h"
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

// A BlinkDL .pth or a .safetensors file of RWKV-7.
absl::StatusOr<Loaded> LoadInput(const std::string& input) {
  std::error_code error;
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

// A tokenizer file to package, as read, and what it is.
struct TokenizerFile {
  std::string path;
  std::string bytes;
  const char* kind;         // the package's tokenizer kind
  const char* chat_format;  // the prompt format models with it use
};

// The tokenizer file of `which` kind: the one given, else the one of its
// usual name in the directory `input`.
absl::StatusOr<TokenizerFile> ReadTokenizerFile(HfTokenizer which, const std::string& input,
                                                const std::string& given) {
  const bool world = which == HfTokenizer::kRwkvWorld;
  const char* name = world ? kVocabularyName : "tokenizer.json";
  TokenizerFile file{given, "", world ? "rwkv-world" : "tokenizer-json",
                     world ? "rwkv-world" : "plain"};
  std::error_code error;
  if (file.path.empty() && fs::is_directory(input, error)) {
    file.path = (fs::path(input) / name).string();
  }
  absl::StatusOr<std::string> bytes =
      file.path.empty() ? absl::NotFoundError("none given") : ReadFileBytes(file.path);
  if (!bytes.ok()) {
    return absl::NotFoundError(absl::StrCat(
        file.path.empty() ? input + " holds no " + name : file.path + " cannot be read",
        "; give --tokenizer=", name,
        world ? " (the RWKV World vocabulary the model was trained with)"
              : " (GPT-NeoX-20B's for Mamba-2 and RWKV-4 Pile models)"));
  }
  file.bytes = *std::move(bytes);
  return file;
}

absl::StatusOr<Tokenizer> ParseTokenizerFile(const TokenizerFile& file) {
  absl::StatusOr<Tokenizer> tokenizer = std::string(file.kind) == "rwkv-world"
                                            ? Tokenizer::FromRwkvVocabulary(file.bytes)
                                            : Tokenizer::FromTokenizerJson(file.bytes);
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(file.path, ": ", tokenizer.status().message()));
  }
  return tokenizer;
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

// The imported model with its tokenizer and origin (`format`, and the
// `files` read besides the tokenizer); errors about the model start with
// `input`, a vocabulary larger than its embedding is refused.
absl::StatusOr<ImportedModel> Assemble(absl::StatusOr<CausalLm> model, const std::string& input,
                                       TokenizerFile tokenizer_file, const std::string& format,
                                       const std::vector<std::string>& files) {
  absl::StatusOr<Tokenizer> tokenizer = ParseTokenizerFile(tokenizer_file);
  if (!tokenizer.ok()) return tokenizer.status();
  if (!model.ok()) {
    return absl::Status(model.status().code(), absl::StrCat(input, ": ", model.status().message()));
  }
  if (tokenizer->vocab_size() > (*model)->config().vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(tokenizer_file.path, " has ", tokenizer->vocab_size(),
                     " tokens; the model's embedding has ", (*model)->config().vocab_size));
  }
  absl::StatusOr<std::string> source = SourceRecord(format, files, tokenizer_file.path);
  if (!source.ok()) return source.status();
  ImportedModel imported;
  imported.model = *std::move(model);
  imported.tokenizer_model = std::move(tokenizer_file.bytes);
  imported.info.tokenizer_kind = tokenizer_file.kind;
  imported.info.chat_format = tokenizer_file.chat_format;
  imported.info.source_json = *source;
  return imported;
}

// A Hugging Face directory: config.json's model_type chooses the
// architecture (hf_registry.h), which says how to read the rest.
absl::StatusOr<ImportedModel> ImportHfDirectory(const std::string& dir,
                                                const std::string& tokenizer_path) {
  const std::string config = (fs::path(dir) / "config.json").string();
  absl::StatusOr<std::string> text = ReadFileBytes(config);
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat(dir,
                                            ": no config.json; a Hugging Face "
                                            "directory holds config.json and model.safetensors"));
  }
  absl::StatusOr<const HfArchitecture*> architecture = FindHfArchitecture(*text);
  if (!architecture.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/", architecture.status().message()));
  }
  absl::StatusOr<TokenizerFile> tokenizer =
      ReadTokenizerFile((*architecture)->tokenizer, dir, tokenizer_path);
  if (!tokenizer.ok()) return tokenizer.status();
  Loaded loaded;
  loaded.files.push_back(config);
  if (absl::Status read = ReadDirectoryTensors(dir, loaded); !read.ok()) return read;
  std::string layout;
  absl::StatusOr<CausalLm> model = (*architecture)->import(*text, loaded.tensors, &layout);
  return Assemble(std::move(model), dir, *std::move(tokenizer), layout, loaded.files);
}

}  // namespace

bool IsCheckpoint(const std::string& path) {
  std::error_code error;
  if (fs::is_directory(path, error)) return true;
  return absl::EndsWith(path, ".safetensors") || IsTorchSave(path);
}

absl::StatusOr<ImportedModel> ImportCheckpoint(const std::string& input,
                                               const std::string& tokenizer_path) {
  std::error_code error;
  if (fs::is_directory(input, error)) return ImportHfDirectory(input, tokenizer_path);
  absl::StatusOr<TokenizerFile> vocabulary =
      ReadTokenizerFile(HfTokenizer::kRwkvWorld, input, tokenizer_path);
  if (!vocabulary.ok()) return vocabulary.status();
  absl::StatusOr<Loaded> loaded = LoadInput(input);
  if (!loaded.ok()) return loaded.status();
  return Assemble(ImportRwkv7(loaded->tensors, loaded->layout), input, *std::move(vocabulary),
                  loaded->format, loaded->files);
}

}  // namespace attn
