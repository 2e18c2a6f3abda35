#include "model/backend/torchscript_backend.h"

#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/backend/guarded.h"
#include "model/lm/checked_archive.h"
#include "model/lm/row_groups.h"
#include "model/mixers/step_rows.h"
#include "model/text/chat_format.h"
#include "model/text/tokenizer.h"
#include "nlohmann/json.hpp"
#include "util/memory.h"

namespace attn {
namespace {

using backend_internal::Guarded;
using backend_internal::GuardedCall;
using backend_internal::Summary;

constexpr char kContract[] = " (docs/model-contract.md)";
constexpr const char* kMethods[] = {"forward", "init_state", "prefill", "step"};

std::string Shape(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

// An int member of `json`, or the error naming it.
absl::Status ReadInt(const nlohmann::json& json, const char* field, int64_t* value) {
  if (!json.contains(field) || !json[field].is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: ", field, ": missing or not an integer"));
  }
  *value = json[field].get<int64_t>();
  return absl::OkStatus();
}

// The tensors of a method's state list; throws naming `method` if it is not one.
std::vector<torch::Tensor> StateList(const c10::IValue& value, const std::string& method) {
  TORCH_CHECK(value.isTensorList() || value.isList(), method,
              " must return its state as List[Tensor]", kContract);
  std::vector<torch::Tensor> tensors;
  for (const auto& element : value.toListRef()) {
    TORCH_CHECK(element.isTensor(), method, ": every state element must be a Tensor", kContract);
    tensors.push_back(element.toTensor());
  }
  return tensors;
}

// Checks a state of `batch` rows against `expected` (the shapes init_state
// gives for that batch, or empty to only check dim 0).
void CheckState(const std::vector<torch::Tensor>& state, const std::string& method, int64_t batch,
                const std::vector<torch::Tensor>& expected) {
  TORCH_CHECK(!state.empty(), method, " returned an empty state", kContract);
  TORCH_CHECK(expected.empty() || state.size() == expected.size(), method, " returned ",
              state.size(), " state tensors; init_state gives ", expected.size());
  for (size_t i = 0; i < state.size(); ++i) {
    TORCH_CHECK(state[i].dim() >= 1 && state[i].size(0) == batch, method, ": state tensor ", i,
                " has shape ", Shape(state[i]), "; dim 0 must be the sequence (", batch, ")",
                kContract);
    TORCH_CHECK(expected.empty() || state[i].sizes() == expected[i].sizes(), method,
                ": state tensor ", i, " has shape ", Shape(state[i]), ", init_state gives ",
                Shape(expected[i]));
  }
}

void CheckLogits(const torch::Tensor& logits, const std::string& method,
                 std::vector<int64_t> expected) {
  TORCH_CHECK(logits.sizes() == c10::IntArrayRef(expected), method, " returned logits of shape ",
              Shape(logits), ", expected ", c10::IntArrayRef(expected), kContract);
  TORCH_CHECK(logits.is_floating_point(), method, " returned logits of type ", logits.scalar_type(),
              ", expected a floating type");
}

// (logits, state) from a method's output.
std::pair<torch::Tensor, std::vector<torch::Tensor>> Unpack(const c10::IValue& out,
                                                            const std::string& method) {
  TORCH_CHECK(out.isTuple() && out.toTupleRef().elements().size() == 2, method,
              " must return (logits, state)", kContract);
  const auto& elements = out.toTupleRef().elements();
  TORCH_CHECK(elements[0].isTensor(), method, ": logits must be a Tensor", kContract);
  return {elements[0].toTensor(), StateList(elements[1], method)};
}

// Elements of the module's parameters and buffers, the tokenizer's aside.
int64_t CountParameters(const torch::jit::Module& module) {
  int64_t count = 0;
  for (const auto& p : module.named_parameters()) count += p.value.numel();
  for (const auto& b : module.named_buffers()) {
    if (b.name != "tokenizer") count += b.value.numel();
  }
  return count;
}

// Whether ids (CPU int64) are first, first + 1, ...
bool Consecutive(const torch::Tensor& ids, int64_t* first) {
  const int64_t* p = ids.data_ptr<int64_t>();
  for (int64_t i = 1; i < ids.numel(); ++i) {
    if (p[i] != p[0] + i) return false;
  }
  *first = ids.numel() > 0 ? p[0] : 0;
  return true;
}

// Whether `rows` rows of `row_bytes` fit in the memory left, counting the
// `held` bytes of the rows they replace. init_state writes every byte at
// once (a key/value cache max_context deep), so rows that do not fit would
// bring the kernel's out-of-memory killer, not an allocation error.
absl::Status RowsFitInMemory(int64_t rows, int64_t row_bytes, int64_t held) {
  const std::optional<int64_t> available = AvailableMemoryBytes();
  if (!available.has_value() || rows <= 0 || row_bytes <= 0) return absl::OkStatus();
  const double need = static_cast<double>(rows) * static_cast<double>(row_bytes);
  const double room = static_cast<double>(*available) + static_cast<double>(held);
  if (need <= room) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%d state rows of %.1f MB each (init_state(1)) need %.2f GB, more than the %.2f GB of "
      "memory available; serve fewer rows at once",
      rows, row_bytes / 1e6, need / 1e9, room / 1e9));
}

}  // namespace

absl::StatusOr<ScriptModelConfig> ParseScriptModelConfig(const std::string& text) {
  auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError("config: not a JSON object");
  }
  ScriptModelConfig config;
  for (auto [field, value] : {std::pair<const char*, int64_t*>{"vocab_size", &config.vocab_size},
                              {"eos_id", &config.eos_id},
                              {"state_bytes_per_sequence", &config.state_bytes_per_sequence}}) {
    if (absl::Status read = ReadInt(json, field, value); !read.ok()) return read;
  }
  if (config.vocab_size <= 0)
    return absl::InvalidArgumentError("config: vocab_size: must be positive");
  if (config.eos_id < -1 || config.eos_id >= config.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: eos_id: ", config.eos_id, " is outside [-1, vocab_size)"));
  }
  if (!json.contains("max_context")) {
    return absl::InvalidArgumentError("config: max_context: missing (an integer, or null)");
  }
  if (!json["max_context"].is_null()) {
    if (absl::Status read = ReadInt(json, "max_context", &config.max_context); !read.ok()) {
      return read;
    }
    if (config.max_context < 1) {
      return absl::InvalidArgumentError("config: max_context: must be positive or null");
    }
  }
  const std::vector<std::string>& kinds = Tokenizer::Kinds();
  if (!json.contains("tokenizer") || !json["tokenizer"].is_string() ||
      !Tokenizer::IsKind(json["tokenizer"].get<std::string>())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config: tokenizer: missing or unknown; one of \"", absl::StrJoin(kinds, "\", \""),
        "\" (all but bytes with a uint8 buffer named tokenizer)"));
  }
  config.tokenizer = json["tokenizer"].get<std::string>();
  if (json.contains("chat_format")) {
    ChatFormat format;
    if (!json["chat_format"].is_string() ||
        !ParseChatFormat(json["chat_format"].get<std::string>(), &format)) {
      return absl::InvalidArgumentError("config: chat_format: \"plain\" or \"rwkv-world\"");
    }
    config.chat_format = json["chat_format"].get<std::string>();
  }
  if (json.contains("chat_template")) {
    if (!json["chat_template"].is_object()) {
      return absl::InvalidArgumentError("config: chat_template: must be an object");
    }
    config.chat_template_json = json["chat_template"].dump();
  }
  if (json.contains("lm") && json["lm"].is_object() && json["lm"].contains("mixer")) {
    config.mixer = json["lm"]["mixer"].get<std::string>();
  }
  return config;
}

TorchScriptBackend::TorchScriptBackend(std::unique_ptr<torch::jit::Module> module,
                                       torch::Device device)
    : module_(std::move(module)), device_(device) {}

TorchScriptBackend::~TorchScriptBackend() = default;

absl::StatusOr<std::unique_ptr<TorchScriptBackend>> TorchScriptBackend::Load(
    const std::string& path, torch::Device device) {
  absl::StatusOr<CheckedArchive> loaded = LoadCheckedArchive(path, device, "model");
  if (!loaded.ok()) return loaded.status();
  auto module = std::make_unique<torch::jit::Module>(std::move(loaded->module));
  auto invalid = [&](const auto&... problem) {
    return absl::InvalidArgumentError(absl::StrCat("model ", path, ": ", problem...));
  };
  for (const char* method : kMethods) {
    if (!module->find_method(method)) return invalid("no method ", method, "()", kContract);
  }
  if (!module->hasattr("config") || !module->attr("config").isString()) {
    return invalid("no config attribute (a JSON string)", kContract);
  }
  auto config = ParseScriptModelConfig(module->attr("config").toStringRef());
  if (!config.ok()) return invalid(config.status().message());
  std::unique_ptr<TorchScriptBackend> backend(new TorchScriptBackend(std::move(module), device));
  backend->config_ = *config;
  backend->file_hash_ = loaded->file_hash;
  torch::jit::Module& m = *backend->module_;
  if (config->tokenizer != "bytes") {
    const bool present = m.hasattr("tokenizer") && m.attr("tokenizer").isTensor() &&
                         m.attr("tokenizer").toTensor().scalar_type() == torch::kUInt8 &&
                         m.attr("tokenizer").toTensor().numel() > 0;
    if (!present)
      return invalid("config says tokenizer \"", config->tokenizer,
                     "\" but there is no uint8 "
                     "buffer named tokenizer");
    auto bytes = m.attr("tokenizer").toTensor().to(torch::kCPU).contiguous();
    backend->tokenizer_model_.assign(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                                     bytes.numel());
  }
  backend->parameter_count_ = CountParameters(m);
  // Frozen, the weights become constants of the methods' graphs: no
  // attribute lookup per weight per call, and constant work folded; a
  // bundled model's step takes about a third less time (docs/benchmarks-log.md).
  // A module that cannot be frozen runs as loaded.
  if (auto frozen = Guarded(
          "freezing",
          [&] {
            m.eval();
            return torch::jit::freeze(m, std::vector<std::string>{"init_state", "prefill", "step"});
          });
      frozen.ok()) {
    m = std::move(*frozen);
  }
  // Probe calls: what the server will do, on two rows and two tokens.
  auto probed = GuardedCall("checking the methods", [&] {
    c10::InferenceMode inference;
    auto init = StateList(m.get_method("init_state")({int64_t{2}}), "init_state");
    CheckState(init, "init_state", 2, {});
    auto tokens = torch::zeros({2}, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto [logits, state] =
        Unpack(m.get_method("step")({tokens, c10::List<torch::Tensor>(init)}), "step");
    CheckLogits(logits, "step", {2, config->vocab_size});
    CheckState(state, "step", 2, init);
    auto one = StateList(m.get_method("init_state")({int64_t{1}}), "init_state");
    auto [prefill_logits, prefill_state] = Unpack(
        m.get_method("prefill")({tokens.view({1, 2}), c10::List<torch::Tensor>(one)}), "prefill");
    CheckLogits(prefill_logits, "prefill", {1, 2, config->vocab_size});
    CheckState(prefill_state, "prefill", 1, one);
    backend->empty_row_ = StateList(m.get_method("init_state")({int64_t{1}}), "init_state");
    for (const auto& t : backend->empty_row_) backend->row_bytes_ += t.numel() * t.element_size();
  });
  if (!probed.ok()) return invalid(probed.message());
  return backend;
}

std::unique_ptr<LmBackend> TorchScriptBackend::ShareWeights() const {
  std::unique_ptr<TorchScriptBackend> shared(
      new TorchScriptBackend(std::make_unique<torch::jit::Module>(*module_), device_));
  shared->config_ = config_;
  shared->tokenizer_model_ = tokenizer_model_;
  shared->empty_row_ = empty_row_;  // read only: ResetRow copies from it
  shared->row_bytes_ = row_bytes_;
  shared->parameter_count_ = parameter_count_;
  shared->file_hash_ = file_hash_;
  return shared;
}

absl::Status TorchScriptBackend::AllocateRows(int64_t rows) {
  if (device_.is_cpu()) {
    absl::Status fits = RowsFitInMemory(rows, row_bytes_, rows_ * row_bytes_);
    if (!fits.ok()) return fits;
  }
  return GuardedCall("allocating state rows", [&] {
    c10::InferenceMode inference;
    pool_.clear();  // before the new rows: both at once may not fit
    rows_ = 0;
    pool_ = StateList(module_->get_method("init_state")({rows}), "init_state");
    CheckState(pool_, "init_state", rows, {});
    rows_ = rows;
  });
}

absl::Status TorchScriptBackend::ResetRow(int64_t row) {
  return GuardedCall("resetting a state row", [&] {
    c10::InferenceMode inference;
    for (size_t i = 0; i < pool_.size(); ++i) pool_[i].narrow(0, row, 1).copy_(empty_row_[i]);
  });
}

absl::StatusOr<SavedRow> TorchScriptBackend::SaveRow(int64_t row) {
  return Guarded("saving a state row", [&] {
    c10::InferenceMode inference;
    TORCH_CHECK(row >= 0 && row < rows_, "SaveRow: row ", row, " of ", rows_);
    SavedRow saved;
    for (const auto& t : pool_) saved.tensors.push_back(t.narrow(0, row, 1).clone());
    return saved;
  });
}

absl::Status TorchScriptBackend::LoadRow(int64_t row, const SavedRow& saved) {
  if (row < 0 || row >= rows_) {
    return absl::InvalidArgumentError(absl::StrCat("LoadRow: row ", row, " of ", rows_));
  }
  // A row of init_state(1)'s shapes and dtypes, tensor for tensor.
  if (saved.tensors.size() != empty_row_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("saved state: ", saved.tensors.size(),
                                                   " tensors, the model's state holds ",
                                                   empty_row_.size()));
  }
  for (size_t i = 0; i < empty_row_.size(); ++i) {
    const torch::Tensor& got = saved.tensors[i];
    if (!got.defined() || got.scalar_type() != empty_row_[i].scalar_type() ||
        got.sizes() != empty_row_[i].sizes()) {
      return absl::InvalidArgumentError(absl::StrCat("saved state: tensor ", i,
                                                     " does not have the shape and dtype of the ",
                                                     "model's init_state(1)"));
    }
  }
  return GuardedCall("loading a state row", [&] {
    c10::InferenceMode inference;
    for (size_t i = 0; i < pool_.size(); ++i) pool_[i].narrow(0, row, 1).copy_(saved.tensors[i]);
  });
}

torch::Tensor TorchScriptBackend::Run(const std::string& method, const torch::Tensor& tokens,
                                      const torch::Tensor& rows) {
  c10::InferenceMode inference;
  const torch::Tensor ids = rows.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t batch = ids.numel();
  int64_t first = 0;
  const bool consecutive = Consecutive(ids, &first);
  std::vector<torch::Tensor> part;
  for (const auto& t : pool_) {
    part.push_back(consecutive ? t.narrow(0, first, batch) : t.index_select(0, rows));
  }
  auto [logits, state] =
      Unpack(module_->get_method(method)({tokens, c10::List<torch::Tensor>(part)}), method);
  CheckState(state, method, batch, part);
  for (size_t i = 0; i < pool_.size(); ++i) {
    if (consecutive && state[i].is_same(part[i])) continue;  // updated in place
    if (consecutive) {
      part[i].copy_(state[i]);
    } else {
      pool_[i].index_copy_(0, rows, state[i].to(pool_[i].dtype()));
    }
  }
  return logits;
}

absl::StatusOr<torch::Tensor> TorchScriptBackend::Prefill(const torch::Tensor& tokens,
                                                          const torch::Tensor& rows,
                                                          PrefillLogits wanted) {
  return Guarded("prefill", [&] {
    torch::Tensor logits = Run("prefill", tokens, rows);
    CheckLogits(logits, "prefill", {tokens.size(0), tokens.size(1), config_.vocab_size});
    if (wanted == PrefillLogits::kNone) return torch::Tensor();
    if (wanted == PrefillLogits::kLast) return logits.narrow(1, logits.size(1) - 1, 1);
    return logits;
  });
}

absl::StatusOr<torch::Tensor> TorchScriptBackend::Step(const torch::Tensor& host_tokens,
                                                       const torch::Tensor& host_rows) {
  return Guarded("decode step", [&] {
    c10::InferenceMode inference;
    const torch::Tensor tokens = HostToDevice(host_tokens, device_);
    const torch::Tensor rows = HostToDevice(host_rows, device_);
    const int64_t batch = tokens.size(0);
    // Rows are independent (the contract), so a large step runs as one call
    // per group of rows, a group per intra-op thread, as CausalLm::step does:
    // the small operations between the products then run on every thread.
    const int64_t groups = RowGroups(batch, tokens);
    torch::Tensor logits;
    if (groups == 1) {
      logits = Run("step", tokens, rows);
    } else {
      std::vector<torch::Tensor> parts(groups);
      ForEachRowGroup(batch, groups, [&](int64_t g, int64_t first, int64_t count) {
        parts[g] = Run("step", tokens.narrow(0, first, count), rows.narrow(0, first, count));
      });
      logits = torch::cat(parts);
    }
    CheckLogits(logits, "step", {batch, config_.vocab_size});
    return logits;
  });
}

int64_t TorchScriptBackend::rollback_bytes_per_sequence(int64_t context) const {
  if (!MixerStateGrows(config_.mixer) || config_.max_context <= 0) return row_bytes_;
  return row_bytes_ * std::clamp<int64_t>(context, 1, config_.max_context) / config_.max_context;
}

}  // namespace attn
