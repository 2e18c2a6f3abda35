// Reading config.json's fields for the Hugging Face importers
// (hf_checkpoint.h, lfm2_checkpoint.h, granite_checkpoint.h): every error
// starts "config.json: KEY: " so that a refusal names what to change.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/checkpoints/tensor_mapping.h"
#include "model/lm/config.h"
#include "nlohmann/json.hpp"

namespace attn {

// config.json's text as a JSON object; kInvalidArgument otherwise. JSON as
// Python writes it: the literals Infinity, -Infinity and NaN outside
// strings (json.dumps emits them) become the strings "Infinity",
// "-Infinity" and "NaN", which PythonNumber reads.
absl::StatusOr<nlohmann::json> ParseConfigObject(const std::string& config_json);

// A number, or one of Python's literals as ParseConfigObject keeps them;
// errors name `key`.
absl::StatusOr<double> PythonNumber(const nlohmann::json& value, absl::string_view key);

// The rotary base: rope_parameters.rope_theta (of rope_type "default"),
// else `key`, else `fallback`. Refuses rope_scaling and any other rotary
// parameter by name: the attention layers rotate by the base alone.
absl::StatusOr<double> RopeThetaAt(const nlohmann::json& c, const char* key, double fallback);

// Reads the required positive integers `fields` (PositiveIntAt).
absl::Status ReadPositiveInts(const nlohmann::json& c,
                              std::initializer_list<std::pair<const char*, int64_t*>> fields);

// Refuses a time-step limit at `key` other than the default [0, Infinity]:
// the Mamba-2 blocks do not clamp.
absl::Status NoTimeStepLimit(const nlohmann::json& c, const char* key);

// kInvalidArgument "config.json: KEY: WHAT".
absl::Status RefuseKey(absl::string_view key, absl::string_view what);

// The positive integer (at most 2^24) at `key`; `fallback` when absent or
// null (a negative fallback: the key is required).
absl::StatusOr<int64_t> PositiveIntAt(const nlohmann::json& c, const char* key,
                                      int64_t fallback = -1);
// The number at `key`, `fallback` when absent or null.
absl::StatusOr<double> NumberAt(const nlohmann::json& c, const char* key, double fallback);
// The boolean at `key`, `fallback` when absent or null.
absl::StatusOr<bool> BoolAt(const nlohmann::json& c, const char* key, bool fallback);
// Refuses `key` unless absent, null or equal to `expected` (numbers within
// 1e-12), saying `why`.
absl::Status KeyAgrees(const nlohmann::json& c, const char* key, const nlohmann::json& expected,
                       absl::string_view why);
// Refuses the first key of `c` in neither `read` nor `ignored`, as not an
// option of `family` this server implements.
absl::Status OnlyKnownKeys(const nlohmann::json& c, const std::set<std::string>& read,
                           const std::set<std::string>& ignored, absl::string_view family);

// Sets config->vocab_size to the rows of tensor `embedding` (config.json's
// vocab_size, if any, must agree) and validates the config.
// kInvalidArgument naming the key or tensor.
absl::Status SetVocabulary(const nlohmann::json& c, const TensorMap& tensors,
                           const std::string& embedding, LmConfig* config);

// With a tied head, a stored lm_head.weight must equal `embedding` (some
// exports write both); it may then go unused. kInvalidArgument when it
// differs.
absl::Status AllowTiedHeadCopy(const TensorMap& tensors, const std::string& embedding,
                               Mapping* mapping);

}  // namespace attn
