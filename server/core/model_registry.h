// The models a server hosts: each loaded from its package file, with its
// tokenizer and its own engine (thread, state pool).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "model/backend/backend_kind.h"
#include "server/engine/engine.h"
#include "server/state/initial_states.h"

namespace attn {
class ChatTemplate;
class Tokenizer;
}  // namespace attn

namespace attn::serving {

class Metrics;

struct ModelDescription {
  std::string name;  // the package's file name without ".pt"
  std::string path;
  std::string architecture = "causal-lm";
  std::string mixer;
  int64_t parameters = 0;
  int64_t vocab_size = 0;
  int64_t max_context = 0;  // 0: unbounded
  int64_t state_bytes_per_sequence = 0;
  int64_t layers = 0;
  int64_t d_model = 0;
  std::string device;
  std::string backend;  // "native" or "torchscript"
  // The dense weights a decode step reads: "float32", "int8" or "bf16"
  // (--quantize), and their bytes (int8: the weights and their scales). Empty and 0 for a
  // TorchScript model, whose weights the server does not inspect.
  std::string weight_dtype;
  int64_t weight_bytes = 0;
  std::string fingerprint;            // which states it accepts (server/state/state_blob.h)
  std::string chat_format = "plain";  // the package's prompt format (model/text/chat_format.h)
  // The model's own chat template (model/text/chat_template.h), which
  // renders its chats instead of chat_format: where it came from
  // ("tokenizer_config.json", "chat_template.jinja", --chat_template's file
  // name; empty: none) and the tool-call format it writes ("" for none).
  std::string chat_template;
  std::string tool_call_format;
  bool clean_up_tokenization_spaces = false;  // how /detokenize decodes (tokenizer_config.json)
};

struct HostedModel {
  HostedModel();
  ~HostedModel();
  ModelDescription description;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::shared_ptr<const ChatTemplate> chat_template;  // null: description.chat_format
  // Ids that end a reply rendered by chat_template: its eos_token's, when
  // that is not the tokenizer's eos (a turn end such as <|im_end|>).
  std::vector<int64_t> chat_stop_ids;
  InitialStates initial_states;  // by name (--initial_states)
  std::unique_ptr<Engine> engine;
};

struct RegistryOptions {
  // Package files, or directories whose *.pt files are all loaded.
  std::vector<std::string> paths = {"models"};
  std::string default_model;  // empty: the first model loaded
  std::string device = "cpu";
  // What runs each model (--backend): `backend` for every model but those
  // named in `model_backends`. kAuto: native for this library's packages,
  // TorchScript for any other module that keeps docs/model-contract.md.
  BackendKind backend = BackendKind::kAuto;
  std::map<std::string, BackendKind> model_backends;
  // Quantisation at load (--quantize), for every model but
  // those named in `model_quantization`. Native backend only: a TorchScript
  // model asked to quantise is an error naming it.
  enum class Quantization { kNone, kInt8, kBf16 };
  Quantization quantization = Quantization::kNone;
  std::map<std::string, Quantization> model_quantization;
  // A Jinja chat template file every model renders chats with instead of
  // its own (--chat_template); empty: each package's.
  std::string chat_template;
  EngineOptions engine;
  // Which models get a state cache of engine.state_cache_bytes
  // (--state_cache): kRecurrent, those whose state does not grow with the
  // context (a cache entry of a key/value cache costs its context), and
  // hybrids (LFM2), whose few attention layers' caches ride along.
  enum class StateCache { kOff, kRecurrent, kAll };
  StateCache state_cache = StateCache::kRecurrent;
  // Named initial states per model (--initial_states): model -> name -> file.
  std::map<std::string, std::map<std::string, std::string>> initial_states;
  // The shared state tier (--state_store), not owned; null: none. Models
  // whose state does not grow with the context read and write it.
  StateStore* state_store = nullptr;
  // A model of `paths` (by name) that drafts for the others with the same
  // vocabulary (--draft_model; EngineOptions::draft_model): each gets its
  // own rows over one load of its weights, and it is served as itself too.
  // Empty: none.
  std::string draft_model;
  // A package that does not load stops the start (false), or is left out
  // with a warning naming the file and why (--skip_bad_models); either way
  // at least one model must load.
  bool skip_bad_models = false;
  // Told what loading is doing, one line at a time (attn-server prints
  // them), so that a slow start shows where it is; may be empty.
  std::function<void(const std::string&)> progress;
};

// Parses --backend: "auto", "native" or "torchscript" for every model,
// and/or comma-separated NAME=KIND entries for single models
// ("torchscript", "auto,gru=torchscript"). kInvalidArgument naming --backend.
absl::Status ParseBackendFlag(const std::string& flag, RegistryOptions* options);

// Parses --quantize the same way: "none", "int8" or "bf16" for every model,
// and/or NAME=none|int8|bf16 entries ("int8", "none,big=bf16").
absl::Status ParseQuantizeFlag(const std::string& flag, RegistryOptions* options);

// Parses --state_cache: "recurrent", "all" or "off". kInvalidArgument naming
// --state_cache for anything else.
absl::Status ParseStateCacheFlag(const std::string& flag, RegistryOptions* options);

// The flag spellings of a quantisation ("none", "int8", "bf16") and a state cache
// choice ("off", "recurrent", "all").
std::string QuantizationName(RegistryOptions::Quantization quantization);
std::string StateCacheName(RegistryOptions::StateCache state_cache);

// "cpu", "cuda", "cuda:N". kInvalidArgument naming --device for anything
// else, kFailedPrecondition when CUDA is asked of a build without it.
absl::StatusOr<std::string> CheckDevice(const std::string& device);

class ModelRegistry {
 public:
  // Loads every package and starts its engine. Any failure (a missing or
  // corrupt file, a package without a tokenizer, two models with one name,
  // an unknown default) is an error naming the file or model; with
  // skip_bad_models a package that does not load is skipped instead (and a
  // skipped default model gives way to the first one loaded).
  static absl::StatusOr<std::unique_ptr<ModelRegistry>> Load(const RegistryOptions& options,
                                                             Metrics* metrics);
  ~ModelRegistry();  // stops the engines

  // Empty name: the default model. kNotFound naming the model and listing
  // the hosted ones.
  absl::StatusOr<HostedModel*> Find(const std::string& name) const;
  const std::vector<std::unique_ptr<HostedModel>>& models() const { return models_; }
  const std::string& default_model() const { return default_model_; }

  void DrainAll();
  bool WaitIdleAll(absl::Time deadline);
  void StopAll(const absl::Status& status);

 private:
  ModelRegistry() = default;
  std::vector<std::unique_ptr<HostedModel>> models_;
  std::string default_model_;
};

}  // namespace attn::serving
