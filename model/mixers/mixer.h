// The sequence-mixer contract shared by every token-mixing module that a
// causal language-model layer can hold. A whole block (RWKV-7, RWKV-4,
// Mamba-2) is a mixer too, with its own skeleton (model/mixers/whole_block.h).
//
// A mixer maps x [batch, time, d_model] to y [batch, time, d_model] where
// y_t depends only on x_{<=t}. It offers three equivalent ways to compute the
// same function:
//
//   forward(x)                 the causal parallel form over the whole
//                              sequence (training, scoring);
//   prefill(x, state, slots)   a chunk of C tokens that continues the
//                              sequences held in `state` rows `slots`;
//   step(x, state, slots)      one new token for each sequence.
//
// For every mixer, running prefill on chunks and/or step token by token from
// an initial state gives the same outputs as forward(x) to float precision.
// tests/mixer_equivalence_test.cc proves it for every kind.
//
// State. A MixerState holds only tensors, and dim 0 of each of them indexes a
// sequence ("slot"). A server therefore keeps one MixerState with N rows as a
// pool, and steps any subset of its rows in place by passing their indices
// as `slots`; no row that is not named is read or written. New sequences start
// from rows reset with ResetSlots().
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/mixers/mixer_options.h"
#include "model/mixers/step_rows.h"

namespace attn {

// Per-sequence state of a mixer. See the file comment.
struct MixerState {
  // Number of tokens each sequence has consumed: int64 [N].
  torch::Tensor length;
  // Kind-specific tensors, each with dim 0 of size N.
  std::vector<torch::Tensor> tensors;

  int64_t rows() const { return length.defined() ? length.size(0) : 0; }
  // Bytes held per row, summed over all tensors.
  int64_t bytes_per_row() const;
};

// Copies rows `slots` (int64 [B]) of `pool` into a new state with B rows.
MixerState GatherState(const MixerState& pool, const torch::Tensor& slots);
// Writes the B rows of `part` into rows `slots` of `pool`.
void ScatterState(MixerState& pool, const torch::Tensor& slots, const MixerState& part);
// Advances the lengths of rows `rows` (int64 [B], on any device) of `state`
// by `tokens`, wherever the lengths live. The fused CPU kernels advance
// theirs with kernels::AdvanceLengths on the raw pointers instead.
void AdvanceRows(MixerState& state, const torch::Tensor& rows, int64_t tokens);

// The windowed AFT kinds (aft-*, aft-decay) hold per row three vectors and
// two rings of the last `window` entries in slot order (position mod
// window), in MixerState::tensors order. Their op-by-op prefill works on the
// rows it continues with the rings oldest first, holding only the
// min(window, length) entries that exist.
using WindowRows = std::array<torch::Tensor, 5>;
// Rows `index` of such a state, all at length `start`.
WindowRows GatherWindowRows(const MixerState& state, const torch::Tensor& index, int64_t window,
                            int64_t start);
// Writes `rows` (as GatherWindowRows returns them) back into rows `index`,
// whose sequences are now at length `end`. Lengths are left to the caller.
void ScatterWindowRows(MixerState& state, const torch::Tensor& index, int64_t window, int64_t end,
                       const WindowRows& rows);

// Per-position entries of a state: dim `dim` of its tensors from index
// `first` on holds, for a sequence of `length` tokens, Count(length) entries
// that exist (the rest of that dim is never read). window -1: as many as
// the length (a cache); else at most `window` (a ring).
struct HeldPositions {
  int64_t dim = -1;  // -1: none
  size_t first = 0;
  int64_t window = -1;
  int64_t Count(int64_t length) const { return window < 0 ? length : std::min(length, window); }
};

class SequenceMixer : public torch::nn::Module {
 public:
  explicit SequenceMixer(MixerOptions options) : options_(std::move(options)) {}
  ~SequenceMixer() override = default;

  const MixerOptions& options() const { return options_; }

  // Causal parallel form. x: [B, T, d_model] -> [B, T, d_model].
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;

  // A state with `rows` empty sequences on `device`.
  virtual MixerState initial_state(int64_t rows, torch::Device device) const = 0;

  // Continues the sequences in rows `slots` (int64 [B]; undefined means rows
  // 0..B-1) with the chunk x: [B, C, d_model]; returns [B, C, d_model] and
  // advances those rows by C tokens. All B sequences must be at the same
  // length (the engine batches only prompts at the same position).
  torch::Tensor prefill(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots = {});

  // prefill() of which only the last `keep` tokens' outputs are wanted
  // (0 <= keep <= C): every token of x still enters the state, and the
  // result is [B, keep, d_model], equal to prefill(...).narrow(1, C - keep,
  // keep). A language model's last layer needs no more while it reads a
  // prompt. The fused CPU prefills (AFT, linear, mha) skip the dropped
  // queries' attention and output projection.
  torch::Tensor prefill_last(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots,
                             int64_t keep);

  // One token for each sequence: x [B, d_model] -> [B, d_model]. The rows may
  // be at different lengths. Outside autograd, calls on disjoint `slots` of
  // one state may run concurrently (CausalLm steps groups of rows on several
  // threads), so a step writes nothing but its own rows.
  virtual torch::Tensor step(const torch::Tensor& x, MixerState& state,
                             const torch::Tensor& slots = {}) = 0;

  // Longest sequence this mixer can process; -1 when unbounded.
  virtual int64_t max_context() const = 0;

  // Bytes of state one sequence needs once it has seen `context` tokens:
  // what a row really holds at that context (a cache's rows are backed by
  // memory only as far as they are written; see ReleaseSlots).
  virtual int64_t state_bytes_per_sequence(int64_t context) const = 0;

  // Resets rows `slots` of `state` to the empty sequence. A server calls it
  // for every request it admits.
  virtual void ResetSlots(MixerState& state, const torch::Tensor& slots) const;

  // The sequences in rows `slots` have ended: resets the rows, and gives
  // back the memory they held where the state allows it (a key/value cache
  // returns its rows' pages to the system). A server calls it when a
  // request ends. The default is ResetSlots().
  virtual void ReleaseSlots(MixerState& state, const torch::Tensor& slots) const {
    ResetSlots(state, slots);
  }

  // One sequence copied out and back in (a server's state cache, and state
  // a client holds). SaveRow returns a one-row state with what row `row`
  // really holds: of the positions a state keeps (held_positions()), only
  // those that exist at its length. LoadRow makes row `row` continue such a
  // copy exactly as the saved row would. It throws c10::Error when `saved`
  // does not fit this mixer (the tensors' count, dtypes or shapes, a length
  // past max_context), before writing anything.
  // With `room` > 0 the copies of the held positions get capacity for that
  // many more behind them (within the state's own), so that a later save of
  // the same sequence can extend them in place (SaveRowInto).
  MixerState SaveRow(const MixerState& state, int64_t row, int64_t room = 0) const;
  void LoadRow(MixerState& state, int64_t row, const MixerState& saved) const;
  // Backs the memory of rows `rows` of the state's tensors of a fixed size
  // (not the held positions, which grow with the context) for writing, one
  // call per run of pages. A row reset or released gives its pages back
  // (state_pool.h); a prefill that then reads its zero state and writes the
  // new one faults every page twice, the second time replacing the shared
  // zero page and flushing the other threads' TLBs.
  void BackRowsForWrite(const MixerState& state, const torch::Tensor& rows) const;
  // Whether SaveRowInto(state, row, base) can write row `row`'s held
  // positions into the room behind `base`'s: the row is no shorter, its held
  // positions are a key/value cache's (entries never change once written;
  // AFT's are rescaled as its sequence goes on), and base's memory has room
  // for them.
  bool FitsInto(const MixerState& state, int64_t row, const MixerState& base) const;
  // SaveRow that shares `base`'s memory. `base` is a copy of this row at an
  // earlier length (the row was loaded from it or saved as it, and has only
  // been extended since), FitsInto holds, and the caller owns base's room
  // (nothing else writes there; LmBackend::SaveRowOnto). Writes the held
  // positions past base's into that room and returns views of the memory;
  // the other tensors are copied.
  MixerState SaveRowInto(const MixerState& state, int64_t row, const MixerState& base) const;
  // `copy` is a save of a row that continued `source` (loaded from it or
  // saved as it, and only extended since) into memory of its own, and
  // `prefix` a save no longer than `source`. Returns `prefix` with each of
  // its held positions that views source's memory (the same tensor, at most
  // as long) viewing copy's instead: the same values, since a key/value
  // cache's entries never change once written. The rest stays prefix's own.
  // The state cache moves the cached prefixes of a conversation onto a copy
  // this way, so that source's memory can go while they stay.
  MixerState ViewOnto(const MixerState& prefix, const MixerState& source,
                      const MixerState& copy) const;
  // Speculation's copy of row `row`, taken before a check that RestoreRow
  // may undo: SaveRow, except that an append-only cache's positions (a
  // key/value cache's: entries never change once written) stay in the row,
  // each such tensor copied with none. A check only appends past the row's
  // length, so RestoreRow, which puts such a copy back into the row it came
  // from, sets the length back and copies the other tensors: what was
  // appended past the length is never read and is later overwritten.
  // RestoreRow throws c10::Error when the row is shorter than the copy (it
  // cannot be the row the copy came from).
  MixerState SaveRowForRollBack(const MixerState& state, int64_t row) const;
  void RestoreRow(MixerState& state, int64_t row, const MixerState& saved) const;
  // Bytes SaveRowForRollBack copies at `context` tokens: an append-only
  // cache's copy holds what an empty row does.
  int64_t rollback_bytes_per_sequence(int64_t context) const {
    return state_bytes_per_sequence(AppendOnly() ? 0 : context);
  }
  // Speculation's rollback without the layer's products: rows `slots`, at
  // the lengths a recorded prefill chunk started from, continue by its
  // first `count` positions, applying to their state only the update that
  // chunk's prefill kept the inputs of (`updates`: what the layer left in
  // LayerCarry::updates, model/mixers/whole_block.h). False, changing
  // nothing, for a kind that keeps none (the default).
  virtual bool ReplayUpdates(const std::vector<torch::Tensor>& /*updates*/, MixerState& /*state*/,
                             const torch::Tensor& /*slots*/, int64_t /*count*/) const {
    return false;
  }

 protected:
  // Checks a step/prefill call and resolves `slots` to a CPU int64 tensor.
  torch::Tensor ResolveSlots(const MixerState& state, const torch::Tensor& slots,
                             int64_t batch) const;
  // prefill() and prefill_last() of each kind, x [B, C, d_model] and
  // 0 <= keep <= C already checked: advances rows `slots` by C tokens and
  // returns the last `keep` outputs.
  virtual torch::Tensor Prefill(const torch::Tensor& x, MixerState& state,
                                const torch::Tensor& slots, int64_t keep) = 0;
  // Throws unless the rows `slots` can take `tokens` more tokens.
  void CheckCapacity(const MixerState& state, const torch::Tensor& slots, int64_t tokens) const;
  // Where this mixer's state keeps per-position entries that exist only
  // once a sequence reaches them (a key/value cache, an AFT ring), which
  // SaveRow leaves out. Default: none.
  virtual HeldPositions held_positions() const { return {}; }
  // Whether every tensor of the state is a key/value cache's held positions,
  // whose entries never change once written. AFT's (from its fourth
  // tensor, in a ring) are rescaled as the sequence goes on.
  bool AppendOnly() const {
    const HeldPositions held = held_positions();
    return held.dim >= 0 && held.first == 0 && held.window < 0;
  }
  // The checks of a fused step: validates `slots` and that each row can take
  // one more token. Returns the rows' ids, or null for rows 0..B-1;
  // `holder` keeps converted ids alive.
  const int64_t* PrepareFusedStep(const MixerState& state, const torch::Tensor& slots,
                                  int64_t batch, torch::Tensor* holder) const;
  // The common length of rows `slots`; throws if they differ.
  int64_t CommonLength(const MixerState& state, const torch::Tensor& slots) const;
  // Whether step() (and AFT's prefill) may take the fused CPU path for input
  // x and `state`: CPU float tensors, and nothing autograd must track (the
  // kernels read raw memory, so neither x nor any parameter may need a
  // gradient).
  bool CanFuse(const torch::Tensor& x, const MixerState& state) const;

  MixerOptions options_;
};

// Builds the mixer `options.kind` describes. Throws c10::Error on invalid
// options (for example d_model not divisible by heads).
std::shared_ptr<SequenceMixer> MakeMixer(const MixerOptions& options);

}  // namespace attn
