#include "model/text/tokenizer_json.h"

#include <map>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "model/text/hf_pipeline.h"

namespace attn {
namespace {

using hf::BoolAt;
using hf::Invalid;
using hf::Json;
using hf::TypeOf;

constexpr int64_t kMaxId = int64_t{1} << 24;

uint64_t PairKey(int64_t left, int64_t right) {
  return (static_cast<uint64_t>(left) << 32) | static_cast<uint64_t>(right);
}

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

struct TokenizerJson::Impl {
  // Nested, not in the anonymous namespace: a member's type must not have
  // internal linkage when this file is compiled in a unity batch.
  struct AddedToken {
    int64_t id;
    bool lstrip, rstrip;
  };

  std::string json;
  absl::flat_hash_map<std::string, int64_t> vocab;  // model string -> id
  // (left id, right id) -> (rank, merged id)
  absl::flat_hash_map<uint64_t, std::pair<int, int64_t>> merges;
  std::map<std::string, AddedToken, std::less<>> added;  // content -> token
  bool added_first_byte[256] = {};                       // some added token starts with it
  size_t longest_added = 0;
  std::vector<std::string> token_bytes;      // by id
  std::vector<std::string> special_content;  // by id: a special added token's content
  int64_t byte_tokens[256];                  // <0xAB> ids with byte_fallback, else -1
  int64_t unk = -1;
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  int64_t eos = -1;
  std::vector<int64_t> prefix, suffix;  // the template's special tokens around a text
  hf::Normalizer normalizer;
  hf::PreTokenizer pre_tokenizer;
  hf::Decoder decoder;

  absl::Status ParseModel(const Json& model);
  absl::Status ParseVocab(const Json& model);
  absl::Status ParseMerges(const Json& model);
  absl::Status ParseAddedTokens(const Json& tokens);
  absl::Status ParsePostProcessor(const Json& post, const std::string& where);
  absl::Status ParseTemplate(const Json& processor, const std::string& where);
  void FillTokenBytes(const Json& added_tokens);

  void EncodeStretch(absl::string_view text, bool at_text_start, std::vector<int64_t>& ids) const;
  void EncodeWord(const std::string& word, std::vector<int64_t>& ids) const;
  // A word's characters as symbols (step 4's first half).
  std::vector<int64_t> Symbols(const std::string& word) const;
  // The longest added token at `at`, or null.
  const std::pair<const std::string, AddedToken>* AddedAt(absl::string_view text, size_t at) const;
};

absl::Status TokenizerJson::Impl::ParseModel(const Json& model) {
  if (!model.is_object()) return Invalid("model", "missing or not an object");
  const std::string type = TypeOf(model);
  if (!type.empty() && type != "BPE") {
    return Invalid("model.type", absl::StrCat("\"", type, "\" is not supported (only BPE)"));
  }
  if (auto it = model.find("dropout");
      it != model.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0.0)) {
    return Invalid("model.dropout", "BPE dropout is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && !it->is_null() &&
        !(it->is_string() && it->get<std::string>().empty())) {
      return Invalid(absl::StrCat("model.", key), "is not supported");
    }
  }
  for (auto [key, flag] :
       {std::pair{"byte_fallback", &byte_fallback}, std::pair{"fuse_unk", &fuse_unk},
        std::pair{"ignore_merges", &ignore_merges}}) {
    absl::StatusOr<bool> value = BoolAt(model, key, false, "model");
    if (!value.ok()) return value.status();
    *flag = *value;
  }
  if (auto s = ParseVocab(model); !s.ok()) return s;
  if (auto it = model.find("unk_token"); it != model.end() && !it->is_null()) {
    if (!it->is_string() || !vocab.contains(it->get<std::string>())) {
      return Invalid("model.unk_token", "must be a token of model.vocab");
    }
    unk = vocab.at(it->get<std::string>());
  }
  for (int b = 0; b < 256; ++b) {
    // <0x0A>: the byte in two capital hex digits.
    std::string name = absl::StrCat("<0x", absl::Hex(b, absl::kZeroPad2), ">");
    for (char& c : name) c = c >= 'a' && c <= 'f' ? c - 'a' + 'A' : c;
    auto it = byte_fallback ? vocab.find(name) : vocab.end();
    byte_tokens[b] = it == vocab.end() ? -1 : it->second;
  }
  return ParseMerges(model);
}

absl::Status TokenizerJson::Impl::ParseVocab(const Json& model) {
  auto vocab_json = model.find("vocab");
  if (vocab_json == model.end() || !vocab_json->is_object()) {
    return Invalid("model.vocab", "missing or not an object");
  }
  vocab.reserve(vocab_json->size());
  for (const auto& [token, id] : vocab_json->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxId) {
      return Invalid(absl::StrCat("model.vocab[\"", token, "\"]"), "must be an id in [0, 2^24)");
    }
    vocab[token] = id.get<int64_t>();
  }
  return absl::OkStatus();
}

absl::Status TokenizerJson::Impl::ParseMerges(const Json& model) {
  auto list = model.find("merges");
  if (list == model.end() || !list->is_array()) {
    return Invalid("model.merges", "missing or not an array");
  }
  merges.reserve(list->size());
  int rank = 0;
  for (const Json& merge : *list) {
    const std::string where = absl::StrCat("model.merges[", rank, "]");
    std::string left, right;
    if (merge.is_string()) {
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        return Invalid(where, "must be \"left right\"");
      }
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return Invalid(where, "must be \"left right\" or [left, right]");
    }
    auto l = vocab.find(left), r = vocab.find(right), m = vocab.find(left + right);
    if (l == vocab.end() || r == vocab.end() || m == vocab.end()) {
      return Invalid(where, absl::StrCat("\"", left, "\" + \"", right, "\": a part or the ",
                                         "merged token is not in model.vocab"));
    }
    merges.try_emplace(PairKey(l->second, r->second), rank++, m->second);
  }
  return absl::OkStatus();
}

absl::Status TokenizerJson::Impl::ParseAddedTokens(const Json& tokens) {
  if (tokens.is_null()) return absl::OkStatus();
  if (!tokens.is_array()) return Invalid("added_tokens", "must be an array");
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Json& token = tokens[i];
    const std::string where = absl::StrCat("added_tokens[", i, "]");
    if (!token.is_object() || !token.contains("id") || !token["id"].is_number_integer() ||
        !token.contains("content") || !token["content"].is_string()) {
      return Invalid(where, "needs an integer id and a string content");
    }
    const int64_t id = token["id"].get<int64_t>();
    const std::string content = token["content"].get<std::string>();
    if (id < 0 || id >= kMaxId || content.empty()) {
      return Invalid(where, "needs an id in [0, 2^24) and a non-empty content");
    }
    AddedToken added_token{id, false, false};
    for (auto [flag, value] :
         {std::pair{"lstrip", &added_token.lstrip}, std::pair{"rstrip", &added_token.rstrip}}) {
      absl::StatusOr<bool> set = BoolAt(token, flag, false, where);
      if (!set.ok()) return set.status();
      *value = *set;
    }
    absl::StatusOr<bool> single_word = BoolAt(token, "single_word", false, where);
    if (!single_word.ok()) return single_word.status();
    if (*single_word) return Invalid(absl::StrCat(where, ".single_word"), "is not supported");
    absl::StatusOr<bool> special = BoolAt(token, "special", false, where);
    if (!special.ok()) return special.status();
    added[content] = added_token;
    added_first_byte[static_cast<unsigned char>(content[0])] = true;
    longest_added = std::max(longest_added, content.size());
  }
  // The end of text, by the names families give it.
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>",
                           "<\xef\xbd\x9c"
                           "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"}) {
    for (const Json& token : tokens) {
      if (token["content"] == name && token.value("special", false)) {
        eos = token["id"].get<int64_t>();
        return absl::OkStatus();
      }
    }
  }
  return absl::OkStatus();
}

absl::Status TokenizerJson::Impl::ParseTemplate(const Json& processor, const std::string& where) {
  auto single = processor.find("single");
  auto specials = processor.find("special_tokens");
  if (single == processor.end() || !single->is_array() || specials == processor.end() ||
      !specials->is_object()) {
    return Invalid(where, "a TemplateProcessing needs a single array and special_tokens");
  }
  bool seen_text = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const Json& piece = (*single)[i];
    const std::string at = absl::StrCat(where, ".single[", i, "]");
    if (piece.is_object() && piece.contains("Sequence")) {
      seen_text = true;
      continue;
    }
    if (!piece.is_object() || !piece.contains("SpecialToken") ||
        !piece["SpecialToken"].is_object() ||
        !piece["SpecialToken"].value("id", Json()).is_string()) {
      return Invalid(at, "must be a Sequence or a SpecialToken with an id");
    }
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    auto special = specials->find(name);
    if (special == specials->end() || !special->is_object() || !special->contains("ids") ||
        !(*special)["ids"].is_array()) {
      return Invalid(at, absl::StrCat("\"", name, "\" has no ids in special_tokens"));
    }
    for (const Json& id : (*special)["ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxId) {
        return Invalid(at, absl::StrCat("\"", name, "\": ids must be in [0, 2^24)"));
      }
      (seen_text ? suffix : prefix).push_back(id.get<int64_t>());
    }
  }
  return absl::OkStatus();
}

absl::Status TokenizerJson::Impl::ParsePostProcessor(const Json& post, const std::string& where) {
  const std::string type = TypeOf(post);
  if (post.is_null() || type == "ByteLevel") return absl::OkStatus();  // offsets only
  if (type == "TemplateProcessing") return ParseTemplate(post, where);
  if (type == "Sequence" && post.contains("processors") && post["processors"].is_array()) {
    for (size_t i = 0; i < post["processors"].size(); ++i) {
      auto s =
          ParsePostProcessor(post["processors"][i], absl::StrCat(where, ".processors[", i, "]"));
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  return Invalid(where, absl::StrCat("\"", type,
                                     "\" is not supported (ByteLevel, "
                                     "TemplateProcessing or a Sequence of them)"));
}

void TokenizerJson::Impl::FillTokenBytes(const Json& added_tokens) {
  int64_t size = 0;
  for (const auto& [token, id] : vocab) size = std::max(size, id + 1);
  for (const auto& [content, token] : added) size = std::max(size, token.id + 1);
  for (int64_t id : prefix) size = std::max(size, id + 1);
  for (int64_t id : suffix) size = std::max(size, id + 1);
  token_bytes.assign(size, "");
  special_content.assign(size, "");
  for (const auto& [token, id] : vocab) token_bytes[id] = decoder.TokenBytes(token);
  // An added token decodes through the decoder too, unless special.
  if (!added_tokens.is_array()) return;
  for (const Json& token : added_tokens) {
    const std::string content = token["content"].get<std::string>();
    const bool special = token.value("special", false);
    token_bytes[token["id"].get<int64_t>()] = special ? "" : decoder.TokenBytes(content);
    if (special) special_content[token["id"].get<int64_t>()] = content;
  }
}

std::vector<int64_t> TokenizerJson::Impl::Symbols(const std::string& word) const {
  std::vector<int64_t> symbols;
  bool unknown_run = false;
  for (size_t at = 0; at < word.size();) {
    // One UTF-8 character (the text went through ICU, so it is well formed).
    const unsigned char lead = static_cast<unsigned char>(word[at]);
    const size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    const std::string c = word.substr(at, length);
    at += length;
    if (auto it = vocab.find(c); it != vocab.end()) {
      symbols.push_back(it->second);
      unknown_run = false;
      continue;
    }
    bool all_bytes = byte_fallback;
    for (unsigned char byte : c) all_bytes = all_bytes && byte_tokens[byte] >= 0;
    if (all_bytes) {
      for (unsigned char byte : c) symbols.push_back(byte_tokens[byte]);
      unknown_run = false;
      continue;
    }
    if (unk < 0) continue;  // not representable: dropped, as the tokenizers library does
    if (!(fuse_unk && unknown_run)) symbols.push_back(unk);
    unknown_run = true;
  }
  return symbols;
}

void TokenizerJson::Impl::EncodeWord(const std::string& word, std::vector<int64_t>& ids) const {
  if (ignore_merges) {
    if (auto it = vocab.find(word); it != vocab.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  std::vector<int64_t> symbols = Symbols(word);
  const int n = static_cast<int>(symbols.size());
  std::vector<int> next(n), prev(n);
  for (int i = 0; i < n; ++i) next[i] = i + 1 < n ? i + 1 : -1, prev[i] = i - 1;
  // (rank, left position, left id, right id): the lowest rank first, then
  // the leftmost; an entry whose symbols have changed since is skipped.
  using Candidate = std::tuple<int, int, int64_t, int64_t>;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push = [&](int left) {
    if (left < 0 || next[left] < 0) return;
    auto it = merges.find(PairKey(symbols[left], symbols[next[left]]));
    if (it != merges.end())
      queue.emplace(it->second.first, left, symbols[left], symbols[next[left]]);
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const auto [rank, left, left_id, right_id] = queue.top();
    queue.pop();
    const int right = next[left];
    if (symbols[left] != left_id || right < 0 || symbols[right] != right_id) continue;
    symbols[left] = merges.at(PairKey(left_id, right_id)).second;
    symbols[right] = -1;
    next[left] = next[right];
    if (next[left] >= 0) prev[next[left]] = left;
    push(prev[left]);
    push(left);
  }
  for (int i = n > 0 ? 0 : -1; i >= 0; i = next[i]) ids.push_back(symbols[i]);
}

void TokenizerJson::Impl::EncodeStretch(absl::string_view stretch, bool at_text_start,
                                        std::vector<int64_t>& ids) const {
  icu::UnicodeString text = icu::UnicodeString::fromUTF8(
      icu::StringPiece(stretch.data(), static_cast<int32_t>(stretch.size())));
  normalizer.Apply(text);
  std::vector<std::string> words;
  pre_tokenizer.Apply(text, at_text_start, words);
  for (const std::string& word : words) EncodeWord(word, ids);
}

const std::pair<const std::string, TokenizerJson::Impl::AddedToken>* TokenizerJson::Impl::AddedAt(
    absl::string_view text, size_t at) const {
  if (!added_first_byte[static_cast<unsigned char>(text[at])]) return nullptr;
  for (size_t n = std::min(longest_added, text.size() - at); n > 0; --n) {
    auto it = added.find(text.substr(at, n));
    if (it != added.end()) return &*it;
  }
  return nullptr;
}

TokenizerJson::TokenizerJson(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TokenizerJson::TokenizerJson(TokenizerJson&&) noexcept = default;
TokenizerJson& TokenizerJson::operator=(TokenizerJson&&) noexcept = default;
TokenizerJson::~TokenizerJson() = default;

absl::StatusOr<TokenizerJson> TokenizerJson::Parse(absl::string_view text) {
  const Json json = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) return Invalid("(file)", "not a JSON object");
  auto impl = std::make_unique<Impl>();
  impl->json = std::string(text);
  const Json null;
  auto at = [&](const char* key) -> const Json& {
    auto it = json.find(key);
    return it == json.end() ? null : *it;
  };
  if (auto s = impl->ParseModel(at("model")); !s.ok()) return s;
  if (auto s = impl->normalizer.Parse(at("normalizer")); !s.ok()) return s;
  if (auto s = impl->pre_tokenizer.Parse(at("pre_tokenizer")); !s.ok()) return s;
  if (auto s = impl->decoder.Parse(at("decoder")); !s.ok()) return s;
  if (auto s = impl->ParsePostProcessor(at("post_processor"), "post_processor"); !s.ok()) return s;
  if (auto s = impl->ParseAddedTokens(at("added_tokens")); !s.ok()) return s;
  impl->FillTokenBytes(at("added_tokens"));
  return TokenizerJson(std::move(impl));
}

std::vector<int64_t> TokenizerJson::Encode(absl::string_view text, bool add_special_tokens) const {
  const Impl& m = *impl_;
  std::vector<int64_t> ids;
  if (add_special_tokens) ids = m.prefix;
  size_t start = 0, at = 0;
  while (at < text.size()) {
    const auto* token = m.AddedAt(text, at);
    if (token == nullptr) {
      ++at;
      continue;
    }
    size_t end = at + token->first.size(), before = at;
    if (token->second.lstrip) {
      while (before > start && IsAsciiSpace(text[before - 1])) --before;
    }
    if (token->second.rstrip) {
      while (end < text.size() && IsAsciiSpace(text[end])) ++end;
    }
    if (before > start) m.EncodeStretch(text.substr(start, before - start), start == 0, ids);
    ids.push_back(token->second.id);
    at = start = end;
  }
  if (start < text.size()) m.EncodeStretch(text.substr(start), start == 0, ids);
  if (add_special_tokens) ids.insert(ids.end(), m.suffix.begin(), m.suffix.end());
  return ids;
}

const std::string& TokenizerJson::TokenBytes(int64_t id) const {
  static const std::string* const kNone = new std::string;
  if (id < 0 || id >= size()) return *kNone;
  return impl_->token_bytes[id];
}

const std::string& TokenizerJson::SpecialContent(int64_t id) const {
  static const std::string* const kNone = new std::string;
  if (id < 0 || id >= size()) return *kNone;
  return impl_->special_content[id];
}

bool TokenizerJson::strips_leading_space() const { return impl_->decoder.strips_leading_space(); }
int64_t TokenizerJson::size() const { return static_cast<int64_t>(impl_->token_bytes.size()); }
int64_t TokenizerJson::bos_id() const { return impl_->prefix.empty() ? -1 : impl_->prefix[0]; }
int64_t TokenizerJson::eos_id() const { return impl_->eos; }
const std::string& TokenizerJson::json() const { return impl_->json; }

}  // namespace attn
