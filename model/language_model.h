// A causal language model made of the library's mixers.
//
//   h_0 = E[tokens] (+ positions)
//   h_l = h_{l-1} + Mixer_l(Norm(h_{l-1}));  h_l = h_l + FF_l(Norm(h_l))
//   logits = Norm(h_L) E^T              (output head tied to the embedding)
//
// Three equivalent computations, as for the mixers (model/mixer.h):
//   forward(tokens)               [B, T] -> logits [B, T, V], parallel;
//   prefill(tokens, state, slots) [B, C] -> [B, C, V], continuing a state
//                                 (or the last position's logits only, or
//                                 none: see PrefillLogits);
//   step(tokens, slots, state)    [B] -> [B, V], one token per sequence, each
//                                 at its own position; with several
//                                 intra-op threads, large batches step in
//                                 groups of rows, one group per thread, so
//                                 mixers must step disjoint rows
//                                 concurrently.
// A token's position is its sequence's length in the state, so positional
// embeddings agree between the three.
//
// A StatePool preallocates N sequences' states (LmState, one MixerState per
// layer) and hands out rows: sequences join and leave without touching each
// other.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/blocks.h"
#include "model/mixer.h"
#include "model/norms.h"
#include "model/positions.h"

namespace attn {

enum class PositionKind { kNone, kSinusoidal, kLearned };

std::string PositionKindName(PositionKind kind);  // "none", "sinusoidal", "learned"
bool ParsePositionKind(const std::string& name, PositionKind* kind);

struct LmConfig {
  int64_t vocab_size = 4096;
  int64_t d_model = 256;
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t ff_hidden = 1024;
  MixerKind mixer = MixerKind::kAftConv;
  NormKind norm = NormKind::kRmsNorm;
  PositionKind positions = PositionKind::kNone;
  int64_t window = 32;         // aft-local, aft-conv
  int64_t max_context = 2048;  // mixers with a cache or absolute bias; learned positions
  int64_t chunk = 0;           // blocks of the parallel forms; 0: DefaultChunk(mixer)

  // The options every layer's mixer is built with.
  MixerOptions mixer_options() const;
  // kInvalidArgument naming the first field out of range.
  absl::Status Validate() const;
  std::string ToJson() const;
  // Parses and validates; unknown keys are an error (a typo must not pass).
  static absl::StatusOr<LmConfig> FromJson(const std::string& json);
};

// Which logits prefill() returns: every position's [B, C, V] (scoring), the
// last position's [B, 1, V] (a prompt's last chunk: generation needs no
// more), or none, an undefined tensor (a prompt's earlier chunks: only the
// state matters). The state advances the same way in all three. Without
// kAll the head runs on one position at most, and the last layer computes
// what the state needs plus that position's output: its mixer keeps one
// output or none (SequenceMixer::prefill_last) and its feed-forward runs on
// that one row. A 4-layer model skips about a fifth of a prefill's products.
enum class PrefillLogits { kAll, kLast, kNone };

// The recurrent state of N sequences: one MixerState per layer.
struct LmState {
  std::vector<MixerState> layers;

  int64_t rows() const { return layers.empty() ? 0 : layers[0].rows(); }
  // Tokens each row has consumed: int64 [N].
  const torch::Tensor& length() const { return layers.at(0).length; }
  int64_t bytes_per_row() const;
};

class LmLayer;  // mix_norm, mixer, ff_norm, ff: defined in language_model.cc

class CausalLmImpl : public torch::nn::Module {
 public:
  // Throws c10::Error for an invalid config (call config.Validate() first to
  // get a status instead).
  explicit CausalLmImpl(const LmConfig& config);

  torch::Tensor forward(const torch::Tensor& tokens);

  LmState initial_state(int64_t rows, torch::Device device) const;
  torch::Tensor prefill(const torch::Tensor& tokens, LmState& state,
                        const torch::Tensor& slots = {},
                        PrefillLogits logits = PrefillLogits::kAll);
  torch::Tensor step(const torch::Tensor& tokens, const torch::Tensor& slots, LmState& state);
  // Resets rows `slots` to empty sequences.
  void ResetSlots(LmState& state, const torch::Tensor& slots) const;

  const LmConfig& config() const { return config_; }
  // Longest sequence the model can process; -1 when unbounded.
  int64_t max_context() const;
  // State bytes one sequence needs at `context` tokens, summed over layers.
  int64_t state_bytes_per_sequence(int64_t context) const;
  int64_t parameter_count() const;

 private:
  // Token embeddings plus positional embeddings: tokens [..], positions [..].
  torch::Tensor Embed(const torch::Tensor& tokens, const torch::Tensor& positions);
  torch::Tensor Head(const torch::Tensor& hidden);
  // Embedding and every layer's step for rows `slots`: the hidden state
  // before the head.
  torch::Tensor StepLayers(const torch::Tensor& tokens, const torch::Tensor& slots, LmState& state);
  void CheckTokens(const torch::Tensor& tokens) const;

  LmConfig config_;
  torch::nn::Embedding embedding_{nullptr};
  LearnedPositions learned_positions_{nullptr};
  SinusoidalPositions sinusoidal_positions_{nullptr};  // not registered: no parameters
  std::vector<std::shared_ptr<LmLayer>> layers_;       // also in a ModuleList, for names
  Norm final_norm_{nullptr};
};
TORCH_MODULE(CausalLm);

// Preallocated states for `capacity` sequences of one model.
class StatePool {
 public:
  StatePool(const CausalLm& model, int64_t capacity, torch::Device device);

  // A free row, reset to the empty sequence; kResourceExhausted when every
  // row is taken.
  absl::StatusOr<int64_t> Acquire();
  // Returns a row; releasing a free or unknown row is an error.
  absl::Status Release(int64_t slot);

  int64_t capacity() const { return static_cast<int64_t>(in_use_.size()); }
  int64_t in_use() const { return in_use_count_; }
  // Bytes preallocated per row (mixers with a cache at max_context).
  int64_t bytes_per_slot() const { return state_.bytes_per_row(); }
  LmState& state() { return state_; }

 private:
  CausalLm model_;
  LmState state_;
  std::vector<bool> in_use_;
  std::vector<int64_t> free_;  // a stack: the most recently freed row is reused first
  int64_t in_use_count_ = 0;
};

}  // namespace attn
