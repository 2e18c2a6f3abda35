// The seam between the project and libsentencepiece, which cannot share a
// symbol scope with the rest of the process:
//
//  - Debian's libsentencepiece embeds protobuf-lite 3.14 and exports it,
//    while LibTorch and gRPC load libprotobuf 3.21 with the same symbol
//    names. Whichever comes first in the lookup order breaks the other (a
//    crash in libprotobuf's static initialisers, or SentencePiece's version
//    check failing).
//  - SentencePiece's headers declare `namespace absl { using
//    std::string_view; }`, which collides with Debian's Abseil.
//
// So SentencePiece lives in a plugin, libattn_sentencepiece.so
// (model/text/sentencepiece_plugin.cc, which includes nothing of Abseil), that is
// dlopen'ed with RTLD_LOCAL | RTLD_DEEPBIND: it binds to its own protobuf, and
// none of its symbols enter the process's global scope. This interface uses
// only the standard library. Errors come back as a non-empty message.
//
// The plugin is looked for at $ATTN_SENTENCEPIECE_PLUGIN, then where this
// build put it, then next to the running executable and in ../lib, then on
// the library search path.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attn::spm {

struct TrainOptions {
  std::vector<std::string> input_files;
  int vocab_size = 4096;
  std::string model_type = "unigram";  // or "bpe"
  // Sentences sampled for training (0: all of them).
  int64_t input_sentence_size = 2000000;
  int seed = 1;
  int threads = 1;
};

// Trains a model with byte fallback (any UTF-8 text, and any byte, has an
// encoding) and ids <unk> 0, <s> 1, </s> 2. Returns an error message, empty
// on success.
std::string Train(const TrainOptions& options, std::string* serialized_model);

// The plugin's entry points; attn_sentencepiece_api() returns them.
struct PluginApi {
  int version;
  std::string (*train)(const TrainOptions& options, std::string* serialized_model);
  void* (*create)();
  void (*destroy)(void* processor);
  std::string (*load)(void* processor, const std::string& serialized_model);
  void (*encode)(const void* processor, const std::string& text, std::vector<int>* ids);
  std::string (*decode)(const void* processor, const std::vector<int>& ids);
  int (*piece_size)(const void* processor);
  int (*special_id)(const void* processor, int which);  // 0 unk, 1 bos, 2 eos
  std::string (*piece)(const void* processor, int id);
  int (*kind)(const void* processor, int id);  // kByte, kControl, kUnknown, or 0
  std::string (*serialized)(const void* processor);
};
inline constexpr int kPluginApiVersion = 1;
inline constexpr int kByte = 1, kControl = 2, kUnknown = 3;

// The loaded plugin, or null with the reason in *error.
const PluginApi* Plugin(std::string* error);

class Processor {
 public:
  Processor() = default;
  ~Processor();
  Processor(Processor&& other) noexcept;
  Processor& operator=(Processor&& other) noexcept;

  // Returns an error message, empty on success (also when the plugin is
  // missing).
  std::string Load(const std::string& serialized_model);

  std::vector<int> Encode(const std::string& text) const;
  std::string Decode(const std::vector<int>& ids) const;
  int vocab_size() const;
  int bos_id() const;
  int eos_id() const;
  int unk_id() const;
  // The piece of `id` as stored ("\xe2\x96\x81the" for " the", "<0x0A>" for a byte).
  std::string Piece(int id) const;
  // kByte, kControl (<s>, </s>), kUnknown, or 0 for an ordinary piece.
  int Kind(int id) const;
  std::string Serialized() const;

 private:
  const PluginApi* api_ = nullptr;
  void* handle_ = nullptr;
};

}  // namespace attn::spm
