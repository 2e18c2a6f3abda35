// What the engine runs a model through (server/engine/engine.h): a set of state
// rows, one per sequence, and the two calls that advance them.
//
//   Prefill(tokens [B, C], rows)  continues rows that are all at one length
//                                 by C tokens; logits [B, C, V], the last
//                                 position's [B, 1, V], or none
//   Step(tokens [B], rows)        one token per row, each at its own length;
//                                 logits [B, V]
//
// Rows are reset before a sequence starts and released when it ends. Two
// implementations: NativeBackend (this library's CausalLm with its fused
// kernels) and TorchScriptBackend (any TorchScript module that keeps
// docs/model-contract.md). Every failure inside a call, a c10::Error or any
// other exception, comes back as a status: the caller's other rows and
// later calls are unaffected.
#pragma once

#include <torch/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/backend/backend_kind.h"
#include "model/lm/language_model.h"

namespace attn {

// One sequence's state copied out of a row (LmBackend::SaveRow): what
// continuing it in any row of a backend of the same model needs.
struct SavedRow {
  std::vector<torch::Tensor> tensors;  // on the backend's device
  // Set by SaveRowOnto: the tensors of positions (a key/value cache's) view
  // memory with room behind them, and this is shared by every row saved
  // into that memory; it holds the length of the newest. A save extends a
  // row in place only while this equals the row's `length`, so two
  // sequences that continue one saved row never write the same room.
  std::shared_ptr<std::atomic<int64_t>> written;
  int64_t length = 0;
  // Bytes the tensors hold.
  int64_t bytes() const;
};

// One row's tokens [1, C] and the row's id [1], on `device`: the arguments
// of a one-row Prefill.
torch::Tensor RowTokens(const std::vector<int64_t>& tokens, torch::Device device);
torch::Tensor RowIds(int64_t row, torch::Device device);
// Several rows' tokens [R, C] and their ids [R]: kInvalidArgument unless
// there are as many token lists as rows, at least one, all of one length.
absl::StatusOr<torch::Tensor> RowsTokens(const std::vector<int64_t>& rows,
                                         const std::vector<std::vector<int64_t>>& tokens,
                                         torch::Device device);
torch::Tensor RowsIds(const std::vector<int64_t>& rows, torch::Device device);

class LmBackend {
 public:
  virtual ~LmBackend() = default;

  // kNative or kTorchScript.
  virtual BackendKind kind() const = 0;
  virtual torch::Device device() const = 0;
  virtual int64_t vocab_size() const = 0;
  // Longest sequence; -1 when unbounded.
  virtual int64_t max_context() const = 0;
  // State bytes one sequence holds at `context` tokens.
  virtual int64_t state_bytes_per_sequence(int64_t context) const = 0;

  // Allocates `rows` empty rows, replacing any held before.
  virtual absl::Status AllocateRows(int64_t rows) = 0;
  virtual int64_t rows() const = 0;
  // Bytes a row may hold at the most.
  virtual int64_t bytes_per_row() const = 0;
  // Makes `row` an empty sequence.
  virtual absl::Status ResetRow(int64_t row) = 0;
  // The sequence in `row` has ended: reset, with its memory given back
  // where the state allows it.
  virtual absl::Status ReleaseRow(int64_t row) = 0;

  // Copies row `row` out: a cache's rows only as far as they are written.
  virtual absl::StatusOr<SavedRow> SaveRow(int64_t row) = 0;
  // SaveRow for a row that continues `base` (loaded from it or saved as it,
  // and only extended since; null: none): where `base` has room and no other
  // save has extended it, only the positions past base's are copied, into
  // that room, and the two share the memory of their common prefix (a
  // conversation's cached turns hold its key/value prefix once). Otherwise a
  // copy with room for a quarter more. The default is SaveRow(row).
  virtual absl::StatusOr<SavedRow> SaveRowOnto(int64_t row, const SavedRow* base);
  // After SaveRowOnto made `copy`, a row that continued `source`, in memory
  // of its own (another save had taken source's room, or it had none):
  // `prefix`, an earlier save of the same tokens' beginning, with its
  // key/value positions that view source's memory viewing copy's instead
  // (the same values: such positions never change once written), sharing
  // copy's room (none is left behind them). So a document's cached state
  // stays cached at no cost when question after question copies it.
  // The default returns `prefix` unchanged.
  virtual absl::StatusOr<SavedRow> ViewOnto(const SavedRow& prefix, const SavedRow& source,
                                            const SavedRow& copy) const;
  // Makes `row` continue `saved` exactly as the saved row would have.
  // kInvalidArgument naming what does not fit when `saved` is not a row of
  // this model's state (the row must then be reset before reuse).
  virtual absl::Status LoadRow(int64_t row, const SavedRow& saved) = 0;

  // `rows`: int64 [B] on device(). kInternal with the model's message if
  // the model fails; kInvalidArgument for calls that break the contract
  // above (rows at different lengths for Prefill, say).
  virtual absl::StatusOr<torch::Tensor> Prefill(const torch::Tensor& tokens,
                                                const torch::Tensor& rows,
                                                PrefillLogits logits) = 0;
  // Step's tokens and rows may also be on the CPU, which is how the engine
  // passes them: a GPU step then copies them over once and queues all its
  // work without waiting for the GPU until its logits are read.
  virtual absl::StatusOr<torch::Tensor> Step(const torch::Tensor& tokens,
                                             const torch::Tensor& rows) = 0;

  // Speculation (server/engine/speculation.cc) checks drafted tokens in one
  // prefill and then keeps only those it accepted:
  //
  // SaveRowForRollBack copies row `row` before a check; the default is
  // SaveRow. NativeBackend leaves a key/value cache's positions in the row
  // (CausalLm::SaveRowForRollBack): a check only appends past them.
  virtual absl::StatusOr<SavedRow> SaveRowForRollBack(int64_t row) { return SaveRow(row); }
  // Bytes that copy holds at `context` tokens: where it stops growing with
  // the context, speculation pays at any length.
  virtual int64_t rollback_bytes_per_sequence(int64_t context) const {
    return state_bytes_per_sequence(context);
  }
  // PrefillForRollBack feeds tokens[i] to row rows[i], all in one prefill
  // (RowsTokens' rules; the rows at one length unless
  // PrefillsRowsAtAnyLengths), and returns every position's logits
  // [R, C, V], remembering what RollBackRow needs to keep a prefix of each
  // row's tokens. The default is Prefill.
  virtual absl::StatusOr<torch::Tensor> PrefillForRollBack(
      const std::vector<int64_t>& rows, const std::vector<std::vector<int64_t>>& tokens);
  // Whether Prefill continues rows at different lengths: true where no
  // layer places tokens by position (recurrences; NativeBackend over RWKV,
  // Mamba-2, short-conv and linear-attention layers).
  virtual bool PrefillsRowsAtAnyLengths() const { return false; }
  // Makes `row` hold `saved`, a SaveRowForRollBack(row) copy taken just
  // before the last PrefillForRollBack, followed by `kept`, a prefix of the
  // tokens it fed that row. The default loads `saved` and prefills `kept`
  // again; NativeBackend puts the copy back (CausalLm::RestoreRow) and
  // replays the row's record (CausalLm::ReplayPrefix: the state updates
  // alone in RWKV-7 and Mamba-2 models, else the layers' prefills), or
  // prefills `kept` when it is not a prefix of what the last check fed the
  // row or that row rolled back once already.
  virtual absl::Status RollBackRow(int64_t row, const SavedRow& saved,
                                   const std::vector<int64_t>& kept);

  // One sequence's state read from an initial-state file (RWKV-7's tuned
  // states, docs/rwkv7.md), ready for LoadRow. kFailedPrecondition for a
  // model that takes none (every model but rwkv7 on the native backend);
  // the file's own errors otherwise.
  virtual absl::StatusOr<SavedRow> ReadInitialState(const std::string& path) const;

  // Another backend over the same weights, with no rows of its own, so that
  // several engines (one draft model for every served model) hold the
  // weights once; each may run from its own thread. Null where the backend
  // cannot share them (the default): load the package again then.
  virtual std::unique_ptr<LmBackend> ShareWeights() const;
};

// Whether the copy a speculation round takes stops growing within the
// model's context (half the longest context copies as much as all of it):
// a recurrent state, a window, or a native key/value cache, whose
// positions stay in the row; not a TorchScript model's cache. Where it
// does, speculation pays at any length.
bool RollsBackCheaply(const LmBackend& backend);

// Whether the mixer kind named `mixer` (a package config's "mixer") keeps a
// key/value cache, which grows with the context: mha, mha-alibi, relative
// and gqa.
bool MixerStateGrows(const std::string& mixer);

}  // namespace attn
