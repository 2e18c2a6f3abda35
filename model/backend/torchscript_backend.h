// LmBackend over any TorchScript module that keeps the serving contract
// (docs/model-contract.md): methods forward, init_state, prefill and step, a
// `config` JSON attribute, and a tokenizer. Packages this library writes keep
// it (model/lm/torchscript_methods.h); so can a model written in plain
// PyTorch and saved with torch.jit.script (examples/pytorch/).
//
// The backend keeps a pool of init_state(rows) and, for each call, hands the
// module the rows it names (views when they are consecutive, copies
// otherwise) and writes the returned state back into the pool. A module may
// update the tensors it is given in place and return them, or return new
// ones of the same shapes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/backend/backend.h"

namespace torch::jit {
struct Module;
}  // namespace torch::jit

namespace attn {

// The `config` attribute of a served module.
struct ScriptModelConfig {
  int64_t vocab_size = 0;
  int64_t eos_id = -1;       // -1: the model has no end-of-sequence token
  int64_t max_context = -1;  // -1 (JSON null): unbounded
  int64_t state_bytes_per_sequence = 0;
  // "sentencepiece" or "rwkv-world" (the `tokenizer` uint8 buffer holds it),
  // or "bytes".
  std::string tokenizer;
  std::string chat_format = "plain";  // model/text/chat_format.h
  std::string chat_template_json;     // the "chat_template" object (chat_template.h); "" if none
  std::string mixer;  // the "lm" member's mixer for this library's packages; else ""
};

// kInvalidArgument naming the first field that is missing or wrong.
absl::StatusOr<ScriptModelConfig> ParseScriptModelConfig(const std::string& json);

class TorchScriptBackend : public LmBackend {
 public:
  // Loads `path` onto `device` and checks the contract: every method and the
  // config are present, and probe calls (init_state(2), step on it, prefill
  // of two tokens) return what the contract says. kNotFound for a missing
  // file, kDataLoss for an unreadable one, kInvalidArgument naming the method
  // or tensor and what was expected otherwise.
  static absl::StatusOr<std::unique_ptr<TorchScriptBackend>> Load(const std::string& path,
                                                                  torch::Device device);
  ~TorchScriptBackend() override;

  const ScriptModelConfig& config() const { return config_; }
  // The SentencePiece model bytes; empty for tokenizer "bytes".
  const std::string& tokenizer_model() const { return tokenizer_model_; }
  // Elements of the module's parameters and buffers, the tokenizer's aside.
  int64_t parameter_count() const { return parameter_count_; }
  // Hash64 of the model file, hashed as it was read.
  uint64_t file_hash() const { return file_hash_; }

  BackendKind kind() const override { return BackendKind::kTorchScript; }
  torch::Device device() const override { return device_; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_context() const override { return config_.max_context; }
  // A row's bytes whatever the context: the pool holds init_state's shapes.
  int64_t state_bytes_per_sequence(int64_t /*context*/) const override { return row_bytes_; }
  // A speculation round copies the whole row. A key/value cache's row is
  // sized for the longest context, so its copy costs what a cache grown to
  // that length would: reported as growing with the context, so that it
  // does not draft (RollsBackCheaply).
  int64_t rollback_bytes_per_sequence(int64_t context) const override;

  // On the CPU, rows whose init_state bytes exceed the memory available
  // (util/memory.h) are RESOURCE_EXHAUSTED before anything is allocated.
  absl::Status AllocateRows(int64_t rows) override;
  int64_t rows() const override { return rows_; }
  int64_t bytes_per_row() const override { return row_bytes_; }
  absl::Status ResetRow(int64_t row) override;
  absl::Status ReleaseRow(int64_t row) override { return ResetRow(row); }

  // A row as init_state(1) shapes it: a cache at its capacity.
  absl::StatusOr<SavedRow> SaveRow(int64_t row) override;
  absl::Status LoadRow(int64_t row, const SavedRow& saved) override;

  absl::StatusOr<torch::Tensor> Prefill(const torch::Tensor& tokens, const torch::Tensor& rows,
                                        PrefillLogits logits) override;
  absl::StatusOr<torch::Tensor> Step(const torch::Tensor& tokens,
                                     const torch::Tensor& rows) override;
  // A module copy shares its object (parameters and methods); the rows live
  // here, outside the module, so two backends never touch each other's.
  std::unique_ptr<LmBackend> ShareWeights() const override;

 private:
  TorchScriptBackend(std::unique_ptr<torch::jit::Module> module, torch::Device device);
  // Calls `method` ("prefill" or "step") on rows `rows` of the pool and
  // writes their new state back; returns the logits.
  torch::Tensor Run(const std::string& method, const torch::Tensor& tokens,
                    const torch::Tensor& rows);

  std::unique_ptr<torch::jit::Module> module_;
  torch::Device device_;
  ScriptModelConfig config_;
  std::string tokenizer_model_;
  std::vector<torch::Tensor> empty_row_;  // init_state(1)
  std::vector<torch::Tensor> pool_;       // init_state(rows)
  int64_t rows_ = 0;
  int64_t row_bytes_ = 0;
  int64_t parameter_count_ = 0;
  uint64_t file_hash_ = 0;
};

}  // namespace attn
