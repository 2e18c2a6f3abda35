// libattn_sentencepiece.so: the only code that includes SentencePiece. It is
// loaded with dlopen (see model/text/sentencepiece_backend.h for why) and must
// include no Abseil header.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <unordered_map>

#include "model/text/sentencepiece_backend.h"

namespace attn::spm {
namespace {

using sentencepiece::SentencePieceProcessor;

const SentencePieceProcessor& Sp(const void* p) {
  return *static_cast<const SentencePieceProcessor*>(p);
}

std::string TrainModel(const TrainOptions& options, std::string* serialized_model) {
  if (options.input_files.empty()) return "no input files";
  std::string inputs;
  for (const auto& file : options.input_files) {
    if (!std::filesystem::is_regular_file(file)) return "input file " + file + " does not exist";
    inputs += (inputs.empty() ? "" : ",") + file;
  }
  const std::unordered_map<std::string, std::string> args = {
      {"input", inputs},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"model_type", options.model_type},
      {"byte_fallback", "true"},
      // Text must round-trip exactly: no NFKC, no folding of spaces.
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"split_digits", "true"},
      {"character_coverage", "0.9995"},
      {"input_sentence_size", std::to_string(options.input_sentence_size)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(options.threads)},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"minloglevel", "2"},
  };
  sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned int>(options.seed));
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, nullptr, serialized_model);
  return status.ok() ? "" : status.ToString();
}

void* Create() { return new SentencePieceProcessor(); }
void Destroy(void* p) { delete static_cast<SentencePieceProcessor*>(p); }

std::string Load(void* p, const std::string& serialized_model) {
  const auto status =
      static_cast<SentencePieceProcessor*>(p)->LoadFromSerializedProto(serialized_model);
  return status.ok() ? "" : status.ToString();
}

void Encode(const void* p, const std::string& text, std::vector<int>* ids) {
  Sp(p).Encode(text, ids).IgnoreError();  // fails only without a model
}

std::string Decode(const void* p, const std::vector<int>& ids) {
  std::string text;
  Sp(p).Decode(ids, &text).IgnoreError();
  return text;
}

int PieceSize(const void* p) { return Sp(p).GetPieceSize(); }

int SpecialId(const void* p, int which) {
  switch (which) {
    case 1:
      return Sp(p).bos_id();
    case 2:
      return Sp(p).eos_id();
    default:
      return Sp(p).unk_id();
  }
}

std::string Piece(const void* p, int id) { return Sp(p).IdToPiece(id); }

int Kind(const void* p, int id) {
  if (Sp(p).IsByte(id)) return kByte;
  if (Sp(p).IsControl(id)) return kControl;
  if (Sp(p).IsUnknown(id)) return kUnknown;
  return 0;
}

std::string Serialized(const void* p) { return Sp(p).serialized_model_proto(); }

const PluginApi kApi = {kPluginApiVersion, TrainModel, Create, Destroy, Load,      Encode, Decode,
                        PieceSize,         SpecialId,  Piece,  Kind,    Serialized};

}  // namespace
}  // namespace attn::spm

extern "C" __attribute__((visibility("default"))) const attn::spm::PluginApi*
attn_sentencepiece_api() {
  return &attn::spm::kApi;
}
