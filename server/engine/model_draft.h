// Drafts for speculative decoding from a smaller model with the same
// tokenizer (attn-server's --draft_model): it decodes a few tokens greedily
// ahead of the served model, which then checks them all in one prefill.
// Greedy drafts are certain (each is a function of the history), so the
// check's rule (speculation.cc) keeps plain decoding's output, sampled
// included, whatever the drafter proposes; a better drafter only makes
// more of them land.
//
// The drafter keeps a row of its own model per engine slot. A row lags the
// sequence: it holds a prefix of the sequence's tokens and is fed the rest
// before the next draft (one prefill), so plain decode steps between rounds
// (a batch of several rows, a pause) cost the drafter nothing until then.
// After a round it holds the tokens the served model kept, or is put back
// to a copy taken before its drafts.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "model/backend/backend.h"
#include "util/clock.h"

namespace attn::serving {

class ModelDrafter {
 public:
  // What a sequence's row of the drafter holds; a new sequence's is empty
  // (fed < 0: the row is still the slot's previous sequence's).
  struct Row {
    int64_t fed = -1;  // tokens of the sequence's history in the row
  };
  // A round's drafts, and what Settle needs to put the row right.
  struct Drafts {
    std::vector<int64_t> tokens;
    SavedRow before;  // the row after the history, before the drafts
    int64_t history = 0;
    // What feeding the row the history it lacked took (the prompt, the
    // tokens of plain steps since): the price of drafting at all, which
    // the engine keeps apart from whether the round paid.
    absl::Duration catch_up;
    int64_t caught_up = 0;  // the tokens that took
  };

  // The tokens a catch-up feeds `row` before drafting after a history of
  // `history` tokens: those it lacks, or all of them for a new sequence
  // (or one that went back).
  static int64_t ToFeed(const Row& row, int64_t history) {
    return row.fed < 0 || row.fed >= history ? history : history - row.fed;
  }

  // Drafts with `model`, whose vocabulary the caller has checked equals the
  // served model's, among its first `ids` ids (those the served model can
  // choose: an embedding padded past the tokenizer never yields its extra
  // rows). Allocates `rows` rows (the engine's slots); `prefill_chunk`
  // bounds the tokens one catch-up prefill feeds; `clock` (the engine's,
  // which outlives the drafter) times the catch-up.
  static absl::StatusOr<std::unique_ptr<ModelDrafter>> Create(std::shared_ptr<LmBackend> model,
                                                              int64_t rows, int64_t prefill_chunk,
                                                              int64_t ids, const Clock& clock);

  // Up to `max_tokens` greedy tokens after the history `prompt` then
  // `output` (the sequence's tokens from its first prompt token to the next
  // one to feed) for the sequence in `slot`, whose row is `row`. An error
  // leaves `row` unusable (fed < 0 again): the next call starts it afresh.
  absl::StatusOr<Drafts> Draft(int64_t slot, Row& row, absl::Span<const int64_t> prompt,
                               absl::Span<const int64_t> output, int64_t max_tokens);
  // After the served model emitted `emitted` tokens for `drafts`: the row
  // keeps the history and the drafts those tokens confirm.
  absl::Status Settle(int64_t slot, Row& row, const Drafts& drafts, int64_t emitted);

 private:
  ModelDrafter(std::shared_ptr<LmBackend> model, int64_t prefill_chunk, int64_t ids,
               const Clock& clock)
      : model_(std::move(model)), prefill_chunk_(prefill_chunk), ids_(ids), clock_(clock) {}
  // Feeds the history's tokens from row.fed on to the row; the logits
  // after the last.
  absl::StatusOr<torch::Tensor> CatchUp(int64_t slot, Row& row, absl::Span<const int64_t> prompt,
                                        absl::Span<const int64_t> output);

  std::shared_ptr<LmBackend> model_;
  int64_t prefill_chunk_;
  int64_t ids_;
  const Clock& clock_;
};

}  // namespace attn::serving
