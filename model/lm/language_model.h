// A causal language model made of the library's mixers.
//
//   h_0 = E[tokens] (+ positions)
//   h_l = h_{l-1} + Mixer_l(Norm(h_{l-1}));  h_l = h_l + FF_l(Norm(h_l))
//   logits = Norm(h_L) E^T       (the head tied to the embedding, or a
//                                 matrix of its own: tie_embeddings)
// A whole block (RWKV-7, RWKV-4, Mamba-2) is the layer itself: h_l =
// Block_l(h_{l-1}). Either kind of layer is a Block (model/lm/block.h), and
// the layers hand each other a LayerCarry (model/mixers/whole_block.h).
//
// Three equivalent computations, as for the mixers (model/mixers/mixer.h):
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
// embeddings agree between the three. prefill() and step() take tokens and
// rows on the CPU too, check them there and copy them to the state's device
// once (model/mixers/step_rows.h).
//
// A RowPool over a NativeBackend (model/backend/) holds N sequences' states
// and hands out rows: sequences join and leave without touching each other.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/layers/dense.h"
#include "model/layers/norms.h"
#include "model/layers/positions.h"
#include "model/lm/block.h"
#include "model/lm/config.h"
#include "model/mixers/mixer.h"

namespace attn {

// Which logits prefill() returns: every position's [B, C, V] (scoring), the
// last position's [B, 1, V] (a prompt's last chunk: generation needs no
// more), or none, an undefined tensor (a prompt's earlier chunks: only the
// state matters). The state advances the same way in all three. Without
// kAll the head runs on one position at most, and the last layer computes
// what the state needs plus that position's output: its mixer keeps one
// output or none (SequenceMixer::prefill_last) and its feed-forward runs on
// that one row. A 4-layer model skips about a fifth of a prefill's products.
enum class PrefillLogits { kAll, kLast, kNone };

// What one prefill fed each layer, kept when asked (prefill's `record`) so
// that ReplayPrefix can later keep only a prefix of that chunk: the rows it
// continued, their lengths before it, and each layer's input [B, C, d].
// Causality makes a layer's input at a position independent of the
// positions after it, so a prefix's inputs are what a prefill of the prefix
// alone would have computed (up to rounding). `updates`: per layer, what
// it kept of its state update's inputs (LayerCarry::updates; empty where it
// kept none).
struct PrefillRecord {
  torch::Tensor rows;
  torch::Tensor start;
  std::vector<torch::Tensor> inputs;
  std::vector<std::vector<torch::Tensor>> updates;
};

// The recurrent state of N sequences: one MixerState per layer.
struct LmState {
  std::vector<MixerState> layers;

  int64_t rows() const { return layers.empty() ? 0 : layers[0].rows(); }
  // Tokens each row has consumed: int64 [N].
  const torch::Tensor& length() const { return layers.at(0).length; }
  int64_t bytes_per_row() const;
};

class CausalLmImpl : public torch::nn::Module {
 public:
  // Throws c10::Error for an invalid config (call config.Validate() first to
  // get a status instead).
  explicit CausalLmImpl(const LmConfig& config);

  torch::Tensor forward(const torch::Tensor& tokens);

  LmState initial_state(int64_t rows, torch::Device device) const;
  // With `record`, also what ReplayPrefix needs (references to tensors the
  // prefill computes anyway: the layers do not write their inputs). Tokens
  // on the CPU are checked there and copied to the state's device.
  torch::Tensor prefill(const torch::Tensor& tokens, LmState& state,
                        const torch::Tensor& slots = {}, PrefillLogits logits = PrefillLogits::kAll,
                        PrefillRecord* record = nullptr);
  // Rows `record.rows` of `state`, back at the lengths the recorded prefill
  // started from (LoadRow of a copy taken before it), continue by the first
  // `count` tokens of that chunk, as prefill() of those tokens would leave
  // them. When every layer kept its state update's inputs (RWKV-7), each
  // applies only that update to the prefix (SequenceMixer::ReplayUpdates):
  // no product runs. Otherwise each layer runs its prefill on its recorded
  // inputs and computes no outputs (keep 0), so the embedding, the head
  // and the products only outputs need are skipped. Either way
  // speculation's rollback costs a fraction of feeding the kept tokens
  // again. Throws c10::Error when the rows are at other lengths or `count`
  // exceeds the chunk.
  void ReplayPrefix(const PrefillRecord& record, int64_t count, LmState& state);
  torch::Tensor step(const torch::Tensor& tokens, const torch::Tensor& slots, LmState& state);
  // step() for rows the caller has checked (CheckSlots, room for a token)
  // and installed (`rows`, model/mixers/step_rows.h), tokens checked
  // (CheckTokens) and on the model's device: nothing is checked again and
  // no device value is read on the host, which is what a CUDA graph of the
  // step captures (model/backend/step_graphs.h).
  torch::Tensor StepChecked(const torch::Tensor& tokens, const StepRows& rows, LmState& state);
  // Throws c10::Error unless every id is int64 in [0, vocab_size).
  void CheckTokens(const torch::Tensor& tokens) const;
  // Resets rows `slots` to empty sequences.
  void ResetSlots(LmState& state, const torch::Tensor& slots) const;
  // Rows `slots` have ended: resets them and returns the memory they hold
  // where the mixers allow it (SequenceMixer::ReleaseSlots).
  void ReleaseSlots(LmState& state, const torch::Tensor& slots) const;

  // One sequence's state as a flat list, per layer its length and then its
  // tensors, copied as SequenceMixer::SaveRow does. LoadRow writes such a
  // list into row `row`; it throws c10::Error when the list does not fit
  // this model, and may then have written part of the row (reset it).
  // With `room` > 0 a key/value cache's copy has room for that many more
  // positions behind it (SequenceMixer::SaveRow).
  std::vector<torch::Tensor> SaveRow(const LmState& state, int64_t row, int64_t room = 0) const;
  void LoadRow(LmState& state, int64_t row, const std::vector<torch::Tensor>& saved) const;
  // SequenceMixer::FitsInto and SaveRowInto for every layer: a copy of row
  // `row` that shares the memory of `base`, an earlier copy of it, writing
  // only the positions past base's. Throws c10::Error when `base` does not
  // fit this model.
  // SequenceMixer::SaveRowForRollBack and RestoreRow for every layer, in
  // SaveRow's list: the copy a speculation round takes, and putting it back
  // into the row it came from.
  std::vector<torch::Tensor> SaveRowForRollBack(const LmState& state, int64_t row) const;
  void RestoreRow(LmState& state, int64_t row, const std::vector<torch::Tensor>& saved) const;
  // Bytes SaveRowForRollBack copies at `context` tokens, summed over layers.
  int64_t rollback_bytes_per_sequence(int64_t context) const;
  bool FitsInto(const LmState& state, int64_t row, const std::vector<torch::Tensor>& base) const;
  std::vector<torch::Tensor> SaveRowInto(const LmState& state, int64_t row,
                                         const std::vector<torch::Tensor>& base) const;
  // SequenceMixer::ViewOnto for every layer, on SaveRow's lists. Throws
  // c10::Error when a list does not fit this model.
  std::vector<torch::Tensor> ViewOnto(const LmState& state,
                                      const std::vector<torch::Tensor>& prefix,
                                      const std::vector<torch::Tensor>& source,
                                      const std::vector<torch::Tensor>& copy) const;

  const LmConfig& config() const { return config_; }
  // Longest sequence the model can process; -1 when unbounded.
  int64_t max_context() const;
  // State bytes one sequence needs at `context` tokens, summed over layers.
  int64_t state_bytes_per_sequence(int64_t context) const;
  int64_t parameter_count() const;

  // Int8 for every dense projection and the tied embedding/head (the 2-D
  // parameters named *weight; QuantizeWeightInt8 in model/layers/dense.h):
  // the model then computes with the dequantised weights everywhere, and
  // its products multiply the int8 copies by activations rounded to int8 per
  // row (model/kernels/int8_gemm.h). Norms,
  // position tables, the mixers' own parameters and every state stay
  // float32. Returns the bytes a decode step's products then read (int8
  // weights and their scales). Weights that already have an int8 copy (a
  // model loaded from an int8 package) keep it. Throws c10::Error, before
  // changing anything, when a weight is not finite.
  int64_t QuantizeInt8();
  // Bf16 for the same weights (QuantizeWeightBf16 in model/layers/dense.h):
  // each rounded to bf16 and the model then computing with the rounded
  // weights everywhere, its products multiplying the bf16 copies by
  // activations rounded to bf16 (on a CPU with the kernels, on a GPU with
  // LibTorch's bf16 product; `product` says). With LibTorch's product the
  // projections, the embedding and the head then hold only their bf16
  // values (DropFloatValues in model/layers/dense.h): a GPU model's dense
  // weights take half the memory, and the model serves only outside
  // autograd. Quantise on the device that serves: the copies belong to the
  // weights' memory, and moving the model after drops them. Returns the
  // bytes of the bf16 copies. Throws c10::Error, before changing anything,
  // when a weight is not finite.
  int64_t QuantizeBf16(Bf16Product product = Bf16Product::kForDevice);
  // Whether any dense weight has an int8 copy (QuantizeInt8 ran, or the
  // model came from an int8 package).
  bool has_int8_weights() const;
  // Bytes of the 2-D weights (what a float32 decode step's products read).
  int64_t dense_weight_bytes() const;
  // Whether a decode step and the feed-forward halves split their rows into
  // one group per thread (model/lm/row_groups.h): with int8 or bf16 copies,
  // or float32 layer weights within kMaxGroupedWeightBytes.
  // The constructor and the Quantize calls choose; a loader that gives
  // weights int8 copies otherwise calls ChooseRowGroups after.
  bool row_groups() const { return row_groups_; }
  void ChooseRowGroups();

 private:
  // QuantizeBf16's last step with LibTorch's product.
  void DropDenseFloatValues();
  // Token embeddings plus positional embeddings: tokens [..], positions [..].
  // `checked`: the caller checked the positions against learned ones'
  // table (a CUDA graph's replay), which then reads no host value.
  torch::Tensor Embed(const torch::Tensor& tokens, const torch::Tensor& positions,
                      bool checked = false);
  torch::Tensor Head(const torch::Tensor& hidden);
  // Embedding and every layer's step for rows `slots`: the hidden state
  // before the head.
  torch::Tensor StepLayers(const torch::Tensor& tokens, const torch::Tensor& slots, LmState& state);
  // Backs for writing the fixed-size state of those of `rows` that start
  // empty (`start`, their lengths, is 0): SequenceMixer::BackRowsForWrite.
  void BackFreshRows(const LmState& state, const torch::Tensor& rows,
                     const torch::Tensor& start) const;
  // Throws c10::Error naming the first dense weight that is not finite;
  // `format` ("int8", "bf16") says what needs them so.
  void CheckDenseWeightsFinite(const char* format) const;
  // A SaveRow list split into its layers' states, checked to fit this model.
  std::vector<MixerState> SplitSaved(const LmState& state,
                                     const std::vector<torch::Tensor>& saved) const;

  LmConfig config_;
  torch::nn::Embedding embedding_{nullptr};
  LearnedPositions learned_positions_{nullptr};
  SinusoidalPositions sinusoidal_positions_{nullptr};  // not registered: no parameters
  std::vector<std::shared_ptr<Block>> layers_;         // also in a ModuleList, for names
  Norm final_norm_{nullptr};
  torch::Tensor head_;  // [V, d] when not tied to the embedding
  bool row_groups_ = true;
};
TORCH_MODULE(CausalLm);

// model->QuantizeInt8() as a status: kInvalidArgument naming the first
// weight that is not finite, the model then unchanged.
absl::StatusOr<int64_t> QuantizeInt8(CausalLm& model);
// model->QuantizeBf16() as a status, in the same way.
absl::StatusOr<int64_t> QuantizeBf16(CausalLm& model);

// A lower bound on the number of values (parameters and buffers) a model of
// `config` holds, from the dimensions alone and without allocating: every
// dimension that can make a model large (vocabulary, width, depth,
// feed-forward, and the windows and context lengths some mixers store)
// appears in it. LoadPackage compares it with what an archive holds before
// building the model, so a config claiming a model far larger than its
// tensors is refused instead of exhausting memory. As a double: a fuzzed
// config's product of dimensions overflows int64.
double MinimumTensorElements(const LmConfig& config);

}  // namespace attn
