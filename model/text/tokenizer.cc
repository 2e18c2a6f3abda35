#include "model/text/tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/text/rwkv_vocabulary.h"
#include "model/text/sentencepiece_backend.h"
#include "model/text/tokenizer_json.h"
#include "util/utf8.h"

namespace attn {
namespace {

constexpr char kReplacement[] = "\xef\xbf\xbd";  // U+FFFD
constexpr char kWordMark[] = "\xe2\x96\x81";     // U+2581, SentencePiece's space
// What packages called "tokenizer-json" before it had that name.
constexpr char kOlderTokenizerJsonKind[] = "byte-level-bpe";

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<spm::Processor> processor)
    : processor_(std::move(processor)) {}
Tokenizer::Tokenizer(std::unique_ptr<RwkvVocabulary> vocabulary)
    : vocabulary_(std::move(vocabulary)) {}
Tokenizer::Tokenizer(std::unique_ptr<TokenizerJson> json) : json_(std::move(json)) {}
Tokenizer::Tokenizer(int64_t byte_vocab_size, int64_t byte_eos_id)
    : byte_vocab_size_(byte_vocab_size), byte_eos_id_(byte_eos_id) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

absl::StatusOr<Tokenizer> Tokenizer::Train(const TokenizerTrainOptions& options) {
  spm::TrainOptions spm_options;
  spm_options.input_files = options.input_files;
  spm_options.vocab_size = options.vocab_size;
  spm_options.model_type = options.model_type;
  spm_options.input_sentence_size = options.input_sentence_size;
  spm_options.seed = options.seed;
  spm_options.threads = options.threads;
  std::string serialized;
  const std::string error = spm::Train(spm_options, &serialized);
  if (!error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer training failed: ", error));
  }
  return FromSerialized(serialized);
}

absl::StatusOr<Tokenizer> Tokenizer::FromSerialized(const std::string& serialized_model) {
  auto processor = std::make_unique<spm::Processor>();
  const std::string error = processor->Load(serialized_model);
  if (!error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("not a SentencePiece model: ", error));
  }
  return Tokenizer(std::move(processor));
}

absl::StatusOr<Tokenizer> Tokenizer::FromRwkvVocabulary(const std::string& text) {
  absl::StatusOr<RwkvVocabulary> vocabulary = RwkvVocabulary::Parse(text);
  if (!vocabulary.ok()) return vocabulary.status();
  return Tokenizer(std::make_unique<RwkvVocabulary>(*std::move(vocabulary)));
}

absl::StatusOr<Tokenizer> Tokenizer::FromTokenizerJson(const std::string& json) {
  absl::StatusOr<TokenizerJson> parsed = TokenizerJson::Parse(json);
  if (!parsed.ok()) return parsed.status();
  return Tokenizer(std::make_unique<TokenizerJson>(*std::move(parsed)));
}

absl::StatusOr<Tokenizer> Tokenizer::FromStored(const std::string& kind, const std::string& bytes) {
  if (kind == "sentencepiece") return FromSerialized(bytes);
  if (kind == "rwkv-world") return FromRwkvVocabulary(bytes);
  if (kind == "tokenizer-json" || kind == kOlderTokenizerJsonKind) return FromTokenizerJson(bytes);
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer: \"", kind, "\" is not a stored tokenizer kind (sentencepiece, ",
                   "rwkv-world, tokenizer-json)"));
}

const std::vector<std::string>& Tokenizer::Kinds() {
  static const auto* kinds =
      new std::vector<std::string>{"sentencepiece", "rwkv-world", "tokenizer-json", "bytes"};
  return *kinds;
}

bool Tokenizer::IsKind(const std::string& kind) {
  const std::vector<std::string>& kinds = Kinds();
  return kind == kOlderTokenizerJsonKind ||
         std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

absl::StatusOr<Tokenizer> Tokenizer::Bytes(int64_t vocab_size, int64_t eos_id) {
  if (vocab_size < 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("a bytes tokenizer needs vocab_size >= 256, got ", vocab_size));
  }
  if (eos_id < -1 || eos_id >= vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("eos_id ", eos_id, " is outside the vocabulary [0, ", vocab_size, ")"));
  }
  return Tokenizer(vocab_size, eos_id);
}

std::vector<int64_t> Tokenizer::Encode(const std::string& text, bool add_special_tokens) const {
  if (vocabulary_) return vocabulary_->Encode(text);
  if (json_) return json_->Encode(text, add_special_tokens);
  if (!processor_) {
    std::vector<int64_t> ids;
    ids.reserve(text.size());
    for (unsigned char byte : text) ids.push_back(byte);
    return ids;
  }
  const auto ids = processor_->Encode(text);
  return std::vector<int64_t>(ids.begin(), ids.end());
}

std::string Tokenizer::Decode(const std::vector<int64_t>& ids, bool keep_special_tokens) const {
  if (keep_special_tokens && !processor_) {
    // Special tokens' text in place of their (empty) bytes: the leading
    // space a decoder drops is then only the first token's.
    std::string bytes, text;
    for (int64_t id : ids) {
      const std::string special = SpecialText(id);
      bytes += special.empty() ? TokenBytes(id) : special;
    }
    if (drops_leading_space() && !bytes.empty() && bytes[0] == ' ') bytes.erase(0, 1);
    const size_t whole = TakeCompleteUtf8(bytes, &text);
    if (whole < bytes.size()) text += kReplacement;
    return text;
  }
  if (keep_special_tokens) {
    // SentencePiece decodes the runs between control pieces.
    std::string text;
    std::vector<int64_t> run;
    for (int64_t id : ids) {
      const std::string special = SpecialText(id);
      if (special.empty()) {
        run.push_back(id);
        continue;
      }
      text += Decode(run) + special;
      run.clear();
    }
    return text + Decode(run);
  }
  if (!processor_) {
    std::string bytes, text;
    for (int64_t id : ids) bytes += TokenBytes(id);
    if (drops_leading_space() && !bytes.empty() && bytes[0] == ' ') bytes.erase(0, 1);
    const size_t whole = TakeCompleteUtf8(bytes, &text);
    if (whole < bytes.size()) text += kReplacement;  // an unfinished last character
    return text;
  }
  std::vector<int> narrow;
  narrow.reserve(ids.size());
  for (int64_t id : ids) {
    if (id >= 0 && id < text_vocab_size()) narrow.push_back(static_cast<int>(id));
  }
  return processor_->Decode(narrow);
}

int64_t Tokenizer::text_vocab_size() const {
  if (vocabulary_) return vocabulary_->size();
  if (json_) return json_->size();
  return processor_ ? processor_->vocab_size() : byte_vocab_size_;
}
int64_t Tokenizer::vocab_size() const { return std::max(text_vocab_size(), padded_size_); }
void Tokenizer::PadTo(int64_t model_vocab_size) { padded_size_ = model_vocab_size; }
bool Tokenizer::drops_leading_space() const {
  return processor_ != nullptr || (json_ && json_->strips_leading_space());
}
int64_t Tokenizer::bos_id() const {
  if (json_) return json_->bos_id();
  return processor_ ? processor_->bos_id() : -1;
}
int64_t Tokenizer::eos_id() const {
  if (vocabulary_) return 0;  // RWKV World's end of text
  if (json_) return json_->eos_id();
  return processor_ ? processor_->eos_id() : byte_eos_id_;
}
std::string Tokenizer::Serialized() const {
  if (vocabulary_) return vocabulary_->text();
  if (json_) return json_->json();
  return processor_ ? processor_->Serialized() : "";
}
std::string Tokenizer::kind() const {
  if (json_) return "tokenizer-json";
  return vocabulary_ ? "rwkv-world" : processor_ ? "sentencepiece" : "bytes";
}

std::string Tokenizer::SpecialText(int64_t id) const {
  if (id < 0 || id >= text_vocab_size()) return "";
  if (json_) return json_->SpecialContent(id);
  if (processor_ && processor_->Kind(static_cast<int>(id)) == spm::kControl) {
    return processor_->Piece(static_cast<int>(id));
  }
  return "";  // byte vocabularies and RWKV World's have no special tokens' text
}

std::string Tokenizer::TokenBytes(int64_t id) const {
  if (id < 0 || id >= text_vocab_size()) return "";  // padded ids decode to nothing
  if (vocabulary_) return vocabulary_->TokenBytes(id);
  if (json_) return json_->TokenBytes(id);
  if (!processor_) return id < 256 ? std::string(1, static_cast<char>(id)) : "";
  const int i = static_cast<int>(id);
  const int kind = processor_->Kind(i);
  if (kind == spm::kControl) return "";
  // An unknown token decodes as the processor shows it inside a text; a
  // byte token <0xAB> is that byte; a piece has its word marks as spaces.
  if (kind == spm::kUnknown) return processor_->Decode({i});
  const std::string piece = processor_->Piece(i);
  if (kind == spm::kByte) {
    return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
  }
  std::string out;
  for (size_t at = 0; at < piece.size();) {
    if (piece.compare(at, 3, kWordMark) == 0) {
      out.push_back(' ');
      at += 3;
    } else {
      out.push_back(piece[at++]);
    }
  }
  return out;
}

std::string IncrementalDecoder::Push(int64_t id) {
  std::string bytes = tokenizer_->TokenBytes(id);
  if (at_start_ && !bytes.empty() && tokenizer_->drops_leading_space()) {
    // Decode drops the space SentencePiece puts before the first word.
    if (bytes[0] == ' ') bytes.erase(0, 1);
    at_start_ = false;
  }
  pending_ += bytes;
  std::string out;
  pending_.erase(0, TakeCompleteUtf8(pending_, &out));
  return out;
}

std::string IncrementalDecoder::Finish() {
  std::string out;
  if (!pending_.empty()) out = kReplacement;
  pending_.clear();
  return out;
}

}  // namespace attn
