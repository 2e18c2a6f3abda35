// The engine's policy apart from running anything: which queued requests
// start, which running ones end unasked (cancelled, past their deadline),
// which prompts share a prefill step and which sequences a decode step.
// Each answer is a pure function of the sequence lists and a clock reading,
// so tests drive it with sequences they make (a puppet of the engine) and a
// fake clock, with no model (tests/server/scheduler_test.cc). The engine
// (engine.cc) asks it at every iteration and carries out what it says
// (executor.cc).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "model/lm/continuation.h"
#include "server/engine/engine.h"
#include "server/engine/model_draft.h"
#include "server/state/state_store.h"

namespace attn::serving::engine_internal {

// A lookup in the shared state tier for a sequence: the tier's thread
// answers it, the engine thread applies it.
struct StoreFetch {
  absl::Mutex mu;
  bool answered ABSL_GUARDED_BY(mu) = false;
  StoreHit hit ABSL_GUARDED_BY(mu);
  absl::Time give_up;  // in case no answer comes: prefill without it
};

struct Sequence {
  EngineRequest request;
  std::shared_ptr<RequestStream> stream;  // null once ended
  absl::Time arrival;
  absl::Time last_token;
  int64_t slot = -1;
  int64_t reservation = 0;                     // state bytes held against the budget once admitted
  int64_t prefilled = 0;                       // prompt tokens in the state
  std::vector<float> last_logits;              // after the last token in the state
  std::unique_ptr<Continuation> continuation;  // sampling, text and finish rules
  int64_t generated = 0;
  int64_t next_token = -1;    // fed to the next decode step
  int64_t last_decoded = -1;  // the engine's decode step count when it last stepped
  StreamEvent pending;        // tokens not yet pushed (EngineOptions::stream_interval)
  std::vector<int64_t> generated_ids;
  int64_t cache_hit = 0;  // prompt tokens the state cache (or the tier) supplied
  // The saved row the state continues (loaded from it or saved as it): the
  // next save copies only what is new when it has room
  // (LmBackend::SaveRowOnto).
  std::shared_ptr<const SavedRow> saved_base;
  // Set while the shared tier looks for a longer prefix: the sequence
  // holds its slot and waits before prefilling.
  std::shared_ptr<StoreFetch> fetch;
  // return_state: the sequence has finished and its last token is still to
  // be fed to the state (by a decode step that samples nothing) before End.
  bool finishing = false;
  bool last_fed = false;  // that step has run
  // The prompt's end is in the state but not yet in the state cache: its
  // checkpoint waits until the first token has gone out (PrefillChunk), or
  // is taken at End should the sequence end with that token.
  bool end_checkpoint_due = false;
  // Speculative decoding (speculation.cc): how many tokens the next round
  // drafts (0: EngineOptions::draft_tokens), rounds in a row that drafted
  // nothing right, the decode step before which it drafts no more, and
  // its row of the draft model (EngineOptions::draft_model), unless that
  // failed for it.
  struct Drafting {
    int64_t length = 0;
    int64_t misses = 0;
    int64_t resume_at = 0;
    ModelDrafter::Row model_row;
    // The draft model no longer drafts for this sequence: it failed, or
    // kMaxModelMisses of its rounds in a row did not pay while its rounds,
    // catch-ups included, had cost more than they saved.
    bool model_off = false;
    // Plain steps' time the draft model's rounds saved, less what they and
    // its catch-ups cost beyond that: below 0 while it has not paid.
    double model_gain_steps = 0;
    // What the draft model's catch-ups longer than a round's own tokens
    // (the prompt's, those after a pause) took, in seconds.
    double model_lag_seconds = 0;
  } drafting;

  bool prefilling() const { return prefilled < static_cast<int64_t>(request.prompt.size()); }
  bool fetching() const { return fetch != nullptr; }
  bool scoring() const { return request.kind == EngineRequest::Kind::kScore; }
};

// Whether the state cache and the shared tier may keep `seq`'s states: not
// a score's, nor one continuing a client's state.
bool Cacheable(const Sequence& seq);

using Sequences = std::vector<std::unique_ptr<Sequence>>;

class Scheduler {
 public:
  // `cache_checkpoints`: whether prompts' prefill chunks end at the state
  // cache's checkpoints (a cache is on).
  Scheduler(const EngineOptions& options, bool cache_checkpoints)
      : options_(options), cache_checkpoints_(cache_checkpoints) {}

  // What leaves the queue at `now`.
  struct Admissions {
    Sequences admitted;  // to start, in arrival order
    // To end with their reason: cancelled, or past their deadline while
    // queued.
    std::vector<std::pair<std::unique_ptr<Sequence>, absl::Status>> dropped;
  };
  // First come, first served: the front of `waiting` starts while a slot is
  // free (`free_slots`) and its reservation fits the budget beside
  // `*reserved` (which grows by what starts); nothing overtakes it.
  Admissions Admit(std::deque<std::unique_ptr<Sequence>>* waiting, absl::Time now,
                   int64_t free_slots, int64_t budget, int64_t* reserved) const;

  // Running sequences to end now, with the reason: cancelled by their
  // reader, or past their deadline.
  std::vector<std::pair<Sequence*, absl::Status>> Abandoned(const Sequences& active,
                                                            absl::Time now) const;

  // Tokens of `seq`'s next prefill chunk: at most prefill_chunk, ending at
  // the next cache checkpoint (a multiple of state_cache_interval).
  int64_t ChunkLength(const Sequence& seq) const;
  // The next prefill step: the oldest prompt being read, with the prompts at
  // the same position and chunk length, all within one chunk's tokens. A
  // score is prefilled alone (it reports every position); a sequence that
  // waits for the tier is skipped.
  std::vector<Sequence*> PrefillGroup(const Sequences& active) const;
  // The next decode step: sequences with a token to feed whose reader has
  // room, at most max_decode_rows: fewest generated tokens first, then the
  // longest unserved.
  std::vector<Sequence*> DecodeBatch(const Sequences& active) const;

 private:
  const EngineOptions& options_;
  const bool cache_checkpoints_;
};

}  // namespace attn::serving::engine_internal
