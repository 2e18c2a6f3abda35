#include "model/checkpoints/config_fields.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace attn {

using Json = nlohmann::json;

absl::StatusOr<Json> ParseConfigObject(const std::string& config_json) {
  std::string out;
  out.reserve(config_json.size() + 16);
  bool in_string = false;
  for (size_t i = 0; i < config_json.size();) {
    const char c = config_json[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < config_json.size()) {
        out += config_json[i + 1];
        i += 2;
        continue;
      }
      in_string = c != '"';
      ++i;
      continue;
    }
    bool literal = false;
    for (const char* word : {"-Infinity", "Infinity", "NaN"}) {
      const size_t n = std::char_traits<char>::length(word);
      if (config_json.compare(i, n, word) == 0) {
        absl::StrAppend(&out, "\"", word, "\"");
        i += n;
        literal = true;
        break;
      }
    }
    if (literal) continue;
    in_string = c == '"';
    out += c;
    ++i;
  }
  Json json = Json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError("config.json: not a JSON object");
  }
  return json;
}

absl::StatusOr<double> PythonNumber(const Json& value, absl::string_view key) {
  if (value.is_number()) return value.get<double>();
  if (value.is_string()) {
    const std::string s = value.get<std::string>();
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  }
  return RefuseKey(key, absl::StrCat("must be a number, got ", value.dump()));
}

absl::StatusOr<double> RopeThetaAt(const Json& c, const char* key, double fallback) {
  if (auto scaling = c.find("rope_scaling"); scaling != c.end() && !scaling->is_null()) {
    return RefuseKey("rope_scaling", "scaled rotary positions are not supported");
  }
  if (auto p = c.find("rope_parameters"); p != c.end() && !p->is_null()) {
    if (!p->is_object()) return RefuseKey("rope_parameters", "must be an object");
    for (const auto& item : p->items()) {
      if (item.key() == "rope_type" && item.value() == "default") continue;
      if (item.key() != "rope_theta") {
        return RefuseKey(absl::StrCat("rope_parameters.", item.key()), "is not supported");
      }
    }
    if (p->contains("rope_theta")) return NumberAt(*p, "rope_theta", fallback);
  }
  return NumberAt(c, key, fallback);
}

absl::Status ReadPositiveInts(const Json& c,
                              std::initializer_list<std::pair<const char*, int64_t*>> fields) {
  for (auto [key, field] : fields) {
    absl::StatusOr<int64_t> value = PositiveIntAt(c, key);
    if (!value.ok()) return value.status();
    *field = *value;
  }
  return absl::OkStatus();
}

absl::Status NoTimeStepLimit(const Json& c, const char* key) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return absl::OkStatus();
  if (it->is_array() && it->size() == 2) {
    absl::StatusOr<double> low = PythonNumber((*it)[0], key), high = PythonNumber((*it)[1], key);
    if (low.ok() && high.ok() && *low == 0.0 && std::isinf(*high) && *high > 0) {
      return absl::OkStatus();
    }
  }
  return RefuseKey(key, absl::StrCat(it->dump(), ": only [0, Infinity] (no limit) is supported"));
}

absl::Status RefuseKey(absl::string_view key, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("config.json: ", key, ": ", what));
}

absl::StatusOr<int64_t> PositiveIntAt(const Json& c, const char* key, int64_t fallback) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) {
    if (fallback < 0) return RefuseKey(key, "missing");
    return fallback;
  }
  if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > (1 << 24)) {
    return RefuseKey(key, absl::StrCat("must be a positive integer, got ", it->dump()));
  }
  return it->get<int64_t>();
}

absl::StatusOr<double> NumberAt(const Json& c, const char* key, double fallback) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return fallback;
  if (!it->is_number()) return RefuseKey(key, absl::StrCat("must be a number, got ", it->dump()));
  return it->get<double>();
}

absl::StatusOr<bool> BoolAt(const Json& c, const char* key, bool fallback) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return RefuseKey(key, absl::StrCat("must be true or false, got ", it->dump()));
  }
  return it->get<bool>();
}

absl::Status KeyAgrees(const Json& c, const char* key, const Json& expected,
                       absl::string_view why) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null() || *it == expected) return absl::OkStatus();
  if (it->is_number() && expected.is_number() &&
      std::abs(it->get<double>() - expected.get<double>()) < 1e-12) {
    return absl::OkStatus();
  }
  return RefuseKey(key, absl::StrCat(it->dump(), " is not supported (", why, ")"));
}

absl::Status OnlyKnownKeys(const Json& c, const std::set<std::string>& read,
                           const std::set<std::string>& ignored, absl::string_view family) {
  for (const auto& item : c.items()) {
    if (!read.count(item.key()) && !ignored.count(item.key())) {
      return RefuseKey(item.key(),
                       absl::StrCat("is not ", family, " option this server implements"));
    }
  }
  return absl::OkStatus();
}

absl::Status SetVocabulary(const Json& c, const TensorMap& tensors, const std::string& embedding,
                           LmConfig* config) {
  absl::StatusOr<int64_t> vocab = TensorSize(tensors, embedding, 2, 0);
  if (!vocab.ok()) return vocab.status();
  if (absl::StatusOr<int64_t> said = PositiveIntAt(c, "vocab_size", *vocab);
      !said.ok() || *said != *vocab) {
    return RefuseKey("vocab_size", absl::StrCat("says ", c.value("vocab_size", Json()).dump(),
                                                "; tensor ", embedding, " has ", *vocab, " rows"));
  }
  config->vocab_size = *vocab;
  if (absl::Status valid = config->Validate(); !valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json describes no valid model: ", valid.message()));
  }
  return absl::OkStatus();
}

absl::Status AllowTiedHeadCopy(const TensorMap& tensors, const std::string& embedding,
                               Mapping* mapping) {
  const torch::Tensor* stored = FindTensor(tensors, "lm_head.weight");
  const torch::Tensor* table = FindTensor(tensors, embedding);
  if (stored == nullptr || table == nullptr) return absl::OkStatus();
  if (stored->sizes() != table->sizes() || !torch::equal(*stored, *table)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor lm_head.weight differs from ", embedding,
                                                   ", but config.json ties them"));
  }
  mapping->may_skip.insert("lm_head.weight");
  return absl::OkStatus();
}

}  // namespace attn
