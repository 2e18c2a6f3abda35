#include "server/core/model_registry.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/backend/native_backend.h"
#include "model/backend/torchscript_backend.h"
#include "model/lm/language_model.h"
#include "model/lm/model_package.h"
#include "model/text/chat_template.h"
#include "model/text/tokenizer.h"
#include "server/metrics/metrics.h"
#include "server/state/state_blob.h"
#include "util/field_error.h"

namespace attn::serving {
namespace {

namespace fs = std::filesystem;

// Expands directories into their *.pt files (sorted, for a stable order).
absl::StatusOr<std::vector<std::string>> PackageFiles(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::error_code error;
    if (fs::is_directory(path, error)) {
      std::vector<std::string> found;
      for (const auto& entry : fs::directory_iterator(path, error)) {
        if (entry.path().extension() == ".pt") found.push_back(entry.path().string());
      }
      std::sort(found.begin(), found.end());
      if (found.empty()) {
        return absl::NotFoundError(absl::StrCat("no *.pt model packages in directory ", path));
      }
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(path);
    }
  }
  if (files.empty()) return absl::InvalidArgumentError("--models: no model given");
  return files;
}

// A model ready to host: its backend, tokenizer and description.
struct LoadedModel {
  std::unique_ptr<LmBackend> backend;
  std::shared_ptr<const Tokenizer> tokenizer;
  ModelDescription description;
  std::string chat_template_json;  // PackageInfo::chat_template_json
  uint64_t file_hash = 0;          // Hash64 of the model file, as it was read
};

using Quantization = RegistryOptions::Quantization;

absl::StatusOr<LoadedModel> LoadNative(const std::string& path, const torch::Device& device,
                                       Quantization quantization) {
  // Bf16 copies are multiplied on any device; int8 ones feed the CPU's
  // kernels only.
  if (quantization == Quantization::kInt8 && !device.is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": --quantize=int8 copies the weights for the CPU's kernels; on ",
                     device.str(), " serve it with --quantize=bf16 or none, or with --device=cpu"));
  }
  auto package = LoadPackage(path, device);
  if (!package.ok()) return package.status();
  if (package->tokenizer_model.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the package holds no tokenizer; export it with attn-train"));
  }
  auto tokenizer = PackageTokenizer(*package);
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": its tokenizer does not load: ", tokenizer.status().message()));
  }
  LoadedModel loaded;
  CausalLm& model = package->model;
  const LmConfig& config = model->config();
  ModelDescription& d = loaded.description;
  d.mixer = MixerKindName(config.mixer);
  d.chat_format = package->info.chat_format;
  d.parameters = model->parameter_count();
  d.vocab_size = config.vocab_size;
  d.max_context = std::max<int64_t>(model->max_context(), 0);
  d.layers = config.layers;
  d.d_model = config.d_model;
  // Constant for the recurrent mixers; the cache at its longest otherwise.
  d.state_bytes_per_sequence =
      model->state_bytes_per_sequence(d.max_context > 0 ? d.max_context : 4096);
  d.weight_dtype = "float32";
  d.weight_bytes = model->dense_weight_bytes();
  // An int8 package is served with its int8 weights whatever --quantize
  // says: its float values are the dequantised ones either way.
  if (model->has_int8_weights()) quantization = Quantization::kInt8;
  if (quantization != Quantization::kNone) {
    auto bytes = quantization == Quantization::kInt8 ? QuantizeInt8(model) : QuantizeBf16(model);
    if (!bytes.ok())
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", bytes.status().message()));
    d.weight_dtype = QuantizationName(quantization);
    d.weight_bytes = *bytes;
  }
  loaded.tokenizer = std::make_unique<Tokenizer>(std::move(*tokenizer));
  loaded.backend = std::make_unique<NativeBackend>(std::move(model));
  loaded.chat_template_json = package->info.chat_template_json;
  loaded.file_hash = package->file_hash;
  return loaded;
}

absl::StatusOr<LoadedModel> LoadTorchScript(const std::string& path, const torch::Device& device) {
  auto backend = TorchScriptBackend::Load(path, device);
  if (!backend.ok()) return backend.status();
  const ScriptModelConfig& config = (*backend)->config();
  auto tokenizer = config.tokenizer == "bytes"
                       ? Tokenizer::Bytes(config.vocab_size, config.eos_id)
                       : Tokenizer::FromStored(config.tokenizer, (*backend)->tokenizer_model());
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": its tokenizer does not load: ", tokenizer.status().message()));
  }
  if (tokenizer->vocab_size() > config.vocab_size || tokenizer->eos_id() != config.eos_id) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the tokenizer has ", tokenizer->vocab_size(),
                     " ids and end-of-sequence id ", tokenizer->eos_id(),
                     "; config says vocab_size ", config.vocab_size, ", eos_id ", config.eos_id));
  }
  tokenizer->PadTo(config.vocab_size);
  LoadedModel loaded;
  ModelDescription& d = loaded.description;
  d.mixer = config.mixer.empty() ? "custom" : config.mixer;
  d.chat_format = config.chat_format;
  d.parameters = (*backend)->parameter_count();
  d.vocab_size = config.vocab_size;
  d.max_context = std::max<int64_t>(config.max_context, 0);
  d.state_bytes_per_sequence = (*backend)->bytes_per_row();
  loaded.tokenizer = std::make_unique<Tokenizer>(std::move(*tokenizer));
  loaded.file_hash = (*backend)->file_hash();
  loaded.backend = std::move(*backend);
  loaded.chat_template_json = config.chat_template_json;
  return loaded;
}

// kAuto: native when the package is this library's; otherwise TorchScript,
// and if that fails too, both reasons.
absl::StatusOr<LoadedModel> LoadWithBackend(const std::string& path, const torch::Device& device,
                                            BackendKind kind, Quantization quantization) {
  // Quantising is this library's: a TorchScript model is quantised in
  // PyTorch before it is exported.
  const auto script_model = [&]() -> absl::StatusOr<LoadedModel> {
    if (quantization != Quantization::kNone) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": --quantize=", QuantizationName(quantization),
                       " applies to the native backend only; this model runs as TorchScript "
                       "(quantise it in PyTorch before exporting, or set NAME=none)"));
    }
    return LoadTorchScript(path, device);
  };
  if (kind == BackendKind::kTorchScript) return script_model();
  auto native = LoadNative(path, device, quantization);
  if (native.ok() || kind == BackendKind::kNative ||
      native.status().code() != absl::StatusCode::kInvalidArgument) {
    return native;
  }
  auto script = script_model();
  if (script.ok()) return script;
  return absl::InvalidArgumentError(absl::StrCat(
      native.status().message(),
      "; as a TorchScript model (--backend=torchscript): ", script.status().message()));
}

// The chat template `hosted` renders chats with: the package's (its
// ChatTemplateConfig JSON, possibly empty), or --chat_template's in its
// place; none leaves the package's chat_format.
absl::Status AttachChatTemplate(const std::string& path, const std::string& json,
                                const RegistryOptions& options, HostedModel* hosted) {
  ChatTemplateConfig config;
  if (!json.empty()) {
    absl::StatusOr<ChatTemplateConfig> own = ChatTemplateConfig::FromJson(json);
    if (!own.ok())
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", own.status().message()));
    config = *std::move(own);
  }
  if (!options.chat_template.empty()) {
    absl::StatusOr<ChatTemplateConfig> replaced =
        OverrideChatTemplate(std::move(config), options.chat_template);
    if (!replaced.ok()) return replaced.status();
    config = *std::move(replaced);
  }
  ModelDescription& d = hosted->description;
  d.clean_up_tokenization_spaces = config.clean_up_tokenization_spaces;
  if (config.templates.empty()) return absl::OkStatus();
  const std::string eos = config.eos_token;
  absl::StatusOr<std::shared_ptr<const ChatTemplate>> chat =
      ChatTemplate::Create(std::move(config));
  if (!chat.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", chat.status().message()));
  hosted->chat_template = *std::move(chat);
  d.chat_template = hosted->chat_template->config().source;
  d.tool_call_format = hosted->chat_template->tool_call_format();
  if (!eos.empty()) {
    std::vector<int64_t> ids = hosted->tokenizer->Encode(eos, /*add_special_tokens=*/false);
    if (ids.size() == 1 && ids[0] != hosted->tokenizer->eos_id()) hosted->chat_stop_ids = ids;
  }
  return absl::OkStatus();
}

// The package at `path` with the backend and quantisation its name is given
// (--backend, --quantize).
absl::StatusOr<LoadedModel> LoadAsNamed(const std::string& path, const torch::Device& device,
                                        const RegistryOptions& options) {
  const std::string name = fs::path(path).stem().string();
  auto chosen = options.model_backends.find(name);
  const BackendKind kind =
      chosen != options.model_backends.end() ? chosen->second : options.backend;
  auto quantize = options.model_quantization.find(name);
  const Quantization quantization =
      quantize != options.model_quantization.end() ? quantize->second : options.quantization;
  return LoadWithBackend(path, device, kind, quantization);
}

// Whether two tokenizers map every id to the same text.
bool SameVocabulary(const Tokenizer& a, const Tokenizer& b) {
  if (a.vocab_size() != b.vocab_size() || a.eos_id() != b.eos_id()) return false;
  for (int64_t id = 0; id < a.vocab_size(); ++id) {
    if (a.TokenBytes(id) != b.TokenBytes(id) || a.SpecialText(id) != b.SpecialText(id)) {
      return false;
    }
  }
  return true;
}

// --draft_model's package, loaded once: every engine it drafts for, and its
// own, run on backends that share these weights.
struct DraftPackage {
  std::string path;
  LoadedModel loaded;
};

// The draft package at `path`; a model whose state grows is refused (its
// rollback would copy its whole cache).
absl::StatusOr<DraftPackage> LoadDraftPackage(const std::string& path, const torch::Device& device,
                                              const RegistryOptions& options) {
  absl::StatusOr<LoadedModel> loaded = LoadAsNamed(path, device, options);
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrCat("--draft_model: ", path, ": ", loaded.status().message()));
  }
  if (MixerStateGrows(loaded->description.mixer)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--draft_model: ", options.draft_model, "'s state grows with the context (",
                     loaded->description.mixer, "); name a recurrent model"));
  }
  return DraftPackage{path, *std::move(loaded)};
}

// A backend over the draft's weights; loads them again only where the
// backend cannot share them.
absl::StatusOr<std::unique_ptr<LmBackend>> DraftBackend(const DraftPackage& draft,
                                                        const torch::Device& device,
                                                        const RegistryOptions& options) {
  if (std::unique_ptr<LmBackend> shared = draft.loaded.backend->ShareWeights()) return shared;
  absl::StatusOr<LoadedModel> again = LoadAsNamed(draft.path, device, options);
  if (!again.ok()) return again.status();
  return std::move(again->backend);
}

// The package at `path`; the draft package's shares its weights.
absl::StatusOr<LoadedModel> LoadOrShare(const std::string& path, const DraftPackage* draft,
                                        const torch::Device& device,
                                        const RegistryOptions& options) {
  if (draft == nullptr || path != draft->path) return LoadAsNamed(path, device, options);
  absl::StatusOr<std::unique_ptr<LmBackend>> backend = DraftBackend(*draft, device, options);
  if (!backend.ok()) return backend.status();
  const LoadedModel& from = draft->loaded;
  return LoadedModel{*std::move(backend), from.tokenizer, from.description, from.chat_template_json,
                     from.file_hash};
}

// The draft model's backend for `hosted`'s engine (on `backend`), or null
// where it cannot draft: for itself, where a round's copy of a row grows
// with the context (a TorchScript model's key/value cache: rolling back
// would copy it whole; a native one's positions stay in the row), or with
// another vocabulary; a progress line says which.
absl::StatusOr<std::shared_ptr<LmBackend>> DraftModelFor(const DraftPackage* draft,
                                                         const HostedModel& hosted,
                                                         const LmBackend& backend,
                                                         const torch::Device& device,
                                                         const RegistryOptions& options) {
  const ModelDescription& d = hosted.description;
  if (draft == nullptr || draft->path == d.path) return nullptr;
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(absl::StrCat("  ", d.name, line, options.draft_model));
  };
  if (!RollsBackCheaply(backend)) {
    say(" does not draft (a round's copy of its state grows with the context) with ");
    return nullptr;
  }
  if (!SameVocabulary(*draft->loaded.tokenizer, *hosted.tokenizer)) {
    say(" does not draft (another vocabulary) with ");
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<LmBackend>> drafter = DraftBackend(*draft, device, options);
  if (!drafter.ok()) return drafter.status();
  say(" drafts with ");
  return std::shared_ptr<LmBackend>(*std::move(drafter));
}

// On a GPU, a progress line says whether the native backend's decode steps
// replay CUDA graphs, or why not (model/backend/step_graphs.h).
void SayHowStepsRun(const std::string& name, LmBackend& backend, const torch::Device& device,
                    const RegistryOptions& options) {
  if (!device.is_cuda() || !options.progress || backend.kind() != BackendKind::kNative) return;
  auto& native = static_cast<NativeBackend&>(backend);
  options.progress(native.graphs() != nullptr
                       ? absl::StrCat("  ", name, ": decode steps replay CUDA graphs")
                       : absl::StrCat("  ", name,
                                      ": decode steps run eagerly, without CUDA graphs: ",
                                      StepGraphs::Unavailable(native.model(), device)));
}

absl::StatusOr<std::unique_ptr<HostedModel>> LoadModel(const std::string& path,
                                                       const DraftPackage* draft,
                                                       const torch::Device& device,
                                                       const RegistryOptions& options,
                                                       Metrics* metrics) {
  const std::string name = fs::path(path).stem().string();
  auto loaded = LoadOrShare(path, draft, device, options);
  if (!loaded.ok()) return loaded.status();
  EngineOptions engine_options = options.engine;
  // Rows now, so that a model whose state does not fit fails the start-up.
  if (absl::Status rows = loaded->backend->AllocateRows(engine_options.max_active); !rows.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": --max_active=", engine_options.max_active, ": ", rows.message()));
  }
  SayHowStepsRun(name, *loaded->backend, device, options);
  auto hosted = std::make_unique<HostedModel>();
  if (auto files = options.initial_states.find(name); files != options.initial_states.end()) {
    absl::StatusOr<InitialStates> states = LoadInitialStates(name, *loaded->backend, files->second);
    if (!states.ok()) return states.status();
    hosted->initial_states = *std::move(states);
  }
  hosted->description = std::move(loaded->description);
  ModelDescription& d = hosted->description;
  d.name = name;
  d.path = path;
  d.device = device.str();
  d.backend = BackendKindName(loaded->backend->kind());
  hosted->tokenizer = std::move(loaded->tokenizer);
  if (absl::Status chat =
          AttachChatTemplate(path, loaded->chat_template_json, options, hosted.get());
      !chat.ok()) {
    return chat;
  }
  // The request limits of this model: the server's, within its context.
  engine_options.limits.max_context = d.max_context;
  // A key/value cache grows with the context: its entries cost megabytes.
  // A hybrid (short-conv or mamba2 with some gqa layers) is cached: most
  // of its layers' state is constant, and its prefix is what the cache
  // saves; --max_exported_state_bytes bounds what of it leaves the process.
  const bool grows = MixerStateGrows(d.mixer);
  if (options.state_cache == RegistryOptions::StateCache::kOff ||
      (options.state_cache == RegistryOptions::StateCache::kRecurrent && grows)) {
    engine_options.state_cache_bytes = 0;
  }
  d.fingerprint = ModelFingerprint(d.mixer, loaded->file_hash);
  if (!grows) {
    engine_options.state_store = options.state_store;
    engine_options.state_fingerprint = d.fingerprint;
  }
  EngineObserver* observer = nullptr;
  if (metrics != nullptr) {
    observer = metrics->AddModel({d.name, d.mixer, d.architecture, d.device,
                                  StateBudget(engine_options, d.state_bytes_per_sequence),
                                  d.backend, engine_options.state_cache_bytes, d.weight_dtype});
  }
  absl::StatusOr<std::shared_ptr<LmBackend>> drafter =
      DraftModelFor(draft, *hosted, *loaded->backend, device, options);
  if (!drafter.ok()) return drafter.status();
  engine_options.draft_model = *std::move(drafter);
  hosted->engine = std::make_unique<Engine>(std::move(loaded->backend), *hosted->tokenizer,
                                            engine_options, RealClock(), observer);
  return hosted;
}

}  // namespace

HostedModel::HostedModel() = default;
HostedModel::~HostedModel() = default;

namespace {

// A flag of VALUE for every model and/or NAME=VALUE entries for single ones,
// comma-separated; `parse` turns a value into a kind or returns false.
template <typename Kind, typename Parse>
absl::Status ParsePerModelFlag(const std::string& flag, const char* name, const char* choices,
                               Parse parse, Kind* all, std::map<std::string, Kind>* per_model) {
  for (absl::string_view entry : absl::StrSplit(flag, ',', absl::SkipWhitespace())) {
    const std::pair<std::string, std::string> parts =
        absl::StrSplit(entry, absl::MaxSplits('=', 1));
    const std::string& value = parts.second.empty() ? parts.first : parts.second;
    Kind kind;
    if (!parse(value, &kind)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": \"", value, "\" is not ", choices));
    }
    if (parts.second.empty()) {
      *all = kind;
    } else {
      (*per_model)[parts.first] = kind;
    }
  }
  return absl::OkStatus();
}

bool ParseQuantization(const std::string& name, Quantization* quantization) {
  for (Quantization choice : {Quantization::kNone, Quantization::kInt8, Quantization::kBf16}) {
    if (name == QuantizationName(choice)) {
      *quantization = choice;
      return true;
    }
  }
  return false;
}

}  // namespace

absl::Status ParseBackendFlag(const std::string& flag, RegistryOptions* options) {
  return ParsePerModelFlag(flag, "backend", "auto, native or torchscript", ParseBackendKind,
                           &options->backend, &options->model_backends);
}

absl::Status ParseQuantizeFlag(const std::string& flag, RegistryOptions* options) {
  return ParsePerModelFlag(flag, "quantize", "none, int8 or bf16", ParseQuantization,
                           &options->quantization, &options->model_quantization);
}

absl::Status ParseStateCacheFlag(const std::string& flag, RegistryOptions* options) {
  using StateCache = RegistryOptions::StateCache;
  for (StateCache choice : {StateCache::kRecurrent, StateCache::kAll, StateCache::kOff}) {
    if (flag == StateCacheName(choice)) {
      options->state_cache = choice;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--state_cache: \"", flag, "\" is not recurrent, all or off"));
}

std::string QuantizationName(RegistryOptions::Quantization quantization) {
  switch (quantization) {
    case RegistryOptions::Quantization::kInt8:
      return "int8";
    case RegistryOptions::Quantization::kBf16:
      return "bf16";
    case RegistryOptions::Quantization::kNone:
      break;
  }
  return "none";
}

std::string StateCacheName(RegistryOptions::StateCache state_cache) {
  switch (state_cache) {
    case RegistryOptions::StateCache::kOff:
      return "off";
    case RegistryOptions::StateCache::kAll:
      return "all";
    case RegistryOptions::StateCache::kRecurrent:
      break;
  }
  return "recurrent";
}

absl::StatusOr<std::string> CheckDevice(const std::string& device) {
  torch::Device parsed(torch::kCPU);
  try {
    parsed = torch::Device(device);
  } catch (const c10::Error&) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: \"", device, "\" is not a device; use cpu, cuda or cuda:N"));
  }
  if (parsed.is_cuda() && !torch::cuda::is_available()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device: ", device,
                     " asked for, but this build of LibTorch has no CUDA support or sees no GPU; "
                     "use --device=cpu, or build against a CUDA LibTorch"));
  }
  if (!parsed.is_cpu() && !parsed.is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: ", device, " is not supported; use cpu or cuda[:N]"));
  }
  return parsed.str();
}

namespace {

// The per-model options (--backend, --initial_states, --quantize) name
// models that loaded.
absl::Status CheckNamedModels(const RegistryOptions& options, const ModelRegistry& registry) {
  for (const auto& [name, kind] : options.model_backends) {
    if (!registry.Find(name).ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--backend: ", name, "=", BackendKindName(kind), " names no model loaded here"));
    }
  }
  for (const auto& [name, states] : options.initial_states) {
    if (!registry.Find(name).ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--initial_states: ", name, " names no model loaded here"));
    }
  }
  for (const auto& [name, quantization] : options.model_quantization) {
    if (!registry.Find(name).ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--quantize: ", name, "=",
                                                     QuantizationName(quantization),
                                                     " names no model loaded here"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelRegistry>> ModelRegistry::Load(const RegistryOptions& options,
                                                                   Metrics* metrics) {
  if (absl::Status valid = options.engine.Validate(); !valid.ok()) return valid;
  auto device_name = CheckDevice(options.device);
  if (!device_name.ok()) return device_name.status();
  auto files = PackageFiles(options.paths);
  if (!files.ok()) return files.status();
  auto progress = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  std::string draft_path;  // --draft_model's package
  std::unique_ptr<DraftPackage> draft;
  if (!options.draft_model.empty()) {
    for (const std::string& file : *files) {
      if (fs::path(file).stem().string() == options.draft_model) draft_path = file;
    }
    if (draft_path.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--draft_model: ", options.draft_model,
                       " names no package in --models; add its .pt file there (it is served too)"));
    }
    progress(absl::StrCat("loading ", draft_path, " (--draft_model)"));
    auto loaded = LoadDraftPackage(draft_path, torch::Device(*device_name), options);
    if (!loaded.ok()) return loaded.status();
    draft = std::make_unique<DraftPackage>(*std::move(loaded));
  }
  std::unique_ptr<ModelRegistry> registry(new ModelRegistry());
  std::vector<std::string> skipped;  // names of the packages that did not load
  for (const std::string& file : *files) {
    progress(absl::StrCat("loading ", file));
    const absl::Time started = absl::Now();
    auto hosted = LoadModel(file, draft.get(), torch::Device(*device_name), options, metrics);
    if (!hosted.ok()) {
      // Every reason names the file, whichever layer found it.
      const std::string reason = absl::StrContains(hosted.status().message(), file)
                                     ? std::string(hosted.status().message())
                                     : absl::StrCat(file, ": ", hosted.status().message());
      if (!options.skip_bad_models) {
        return absl::Status(hosted.status().code(),
                            absl::StrCat(reason, " (--skip_bad_models serves the others)"));
      }
      progress(absl::StrCat("  skipped: ", reason));
      skipped.push_back(fs::path(file).stem().string());
      continue;
    }
    const std::string& name = (*hosted)->description.name;
    const double state_mib =
        static_cast<double>((*hosted)->engine->state_budget_bytes()) / (1 << 20);
    progress(absl::StrFormat(
        "  %s: %s (%s backend), state of %d slots up to %.1f MiB, loaded in %s", name,
        (*hosted)->description.mixer, (*hosted)->description.backend, options.engine.max_active,
        state_mib, absl::FormatDuration(absl::Now() - started)));
    if (registry->Find(name).ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("two packages are named ", name, " (", file, "); rename one"));
    }
    registry->models_.push_back(std::move(*hosted));
  }
  if (absl::Status named = CheckNamedModels(options, *registry); !named.ok()) return named;
  if (registry->models_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no model loaded: ", skipped.size(), " packages failed (see above)"));
  }
  const bool default_skipped =
      std::find(skipped.begin(), skipped.end(), options.default_model) != skipped.end();
  registry->default_model_ = options.default_model.empty() || default_skipped
                                 ? registry->models_.front()->description.name
                                 : options.default_model;
  if (default_skipped) {
    progress(absl::StrCat("  the default model ", options.default_model, " was skipped; ",
                          registry->default_model_, " is the default"));
  }
  if (!registry->Find(registry->default_model_).ok()) {
    return registry->Find(registry->default_model_).status();
  }
  for (auto& model : registry->models_) {
    progress(absl::StrCat("warming up ", model->description.name));
    model->engine->Start();
  }
  return registry;
}

ModelRegistry::~ModelRegistry() { StopAll(absl::UnavailableError("the server is shutting down")); }

absl::StatusOr<HostedModel*> ModelRegistry::Find(const std::string& name) const {
  const std::string& wanted = name.empty() ? default_model_ : name;
  std::vector<std::string> names;
  for (const auto& model : models_) {
    if (model->description.name == wanted) return model.get();
    names.push_back(model->description.name);
  }
  return FieldError(absl::StatusCode::kNotFound, "model", "\"", wanted,
                    "\" is not hosted here; hosted: ", absl::StrJoin(names, ", "));
}

void ModelRegistry::DrainAll() {
  for (auto& model : models_) model->engine->Drain();
}

bool ModelRegistry::WaitIdleAll(absl::Time deadline) {
  bool idle = true;
  for (auto& model : models_) idle &= model->engine->WaitIdle(deadline);
  return idle;
}

void ModelRegistry::StopAll(const absl::Status& status) {
  for (auto& model : models_) model->engine->Stop(status);
}

}  // namespace attn::serving
