// Internal to server/engine/: the engine's implementation, shared by
// engine.cc (submission, the loop, drain and stop), executor.cc (prefill,
// decode, emit and end, as the scheduler says) and engine_state.cc (the
// state cache, the shared tier and states that requests bring and take).
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdio>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/synchronization/mutex.h"
#include "model/backend/backend.h"
#include "model/backend/row_pool.h"
#include "model/lm/continuation.h"
#include "server/engine/engine.h"
#include "server/engine/scheduler.h"
#include "server/state/state_cache.h"
#include "server/state/state_store.h"
#include "util/cpus.h"

namespace attn::serving {
namespace engine_internal {

// Wakes the engine thread; shared with the streams, which may outlive it.
struct Signal {
  absl::Mutex mu;
  bool woken ABSL_GUARDED_BY(mu) = false;
  bool stopping ABSL_GUARDED_BY(mu) = false;

  void Wake() {
    absl::MutexLock lock(&mu);
    woken = true;
  }
  bool WokenOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return woken || stopping; }
};

// One sequence's part of a speculative decode iteration (speculation.cc).
struct SpeculationRound;

}  // namespace engine_internal

using engine_internal::Scheduler;
using engine_internal::Sequence;
using engine_internal::Signal;
using engine_internal::SpeculationRound;

class Engine::Impl {
 public:
  Impl(std::unique_ptr<LmBackend> backend, const Tokenizer& tokenizer, const EngineOptions& options,
       const Clock& clock, EngineObserver* observer)
      : backend_(WithRows(std::move(backend), options.max_active)),
        tokenizer_(tokenizer),
        options_(options),
        clock_(clock),
        observer_(observer ? observer : &no_observer_),
        device_(backend_->device()),
        pool_(*backend_),
        rows_(pool_.capacity()),
        budget_(StateBudget(options, backend_->bytes_per_row())),
        free_slots_(pool_.capacity()),
        cheap_rollback_(RollsBackCheaply(*backend_)),
        scheduler_(options_, options.state_cache_bytes > 0) {
    if (options.state_cache_bytes > 0) {
      cache_ = std::make_unique<StateCache>(options.state_cache_bytes);
    }
    if (options.draft_model != nullptr) {
      drafter_ = MakeDrafter(options, pool_.capacity(), tokenizer.text_vocab_size(), clock_);
    }
  }

  absl::Status Submit(EngineRequest request, std::shared_ptr<RequestStream> stream);
  bool RunOnce();
  void Loop();
  void Start() {
    // From here the engine thread does the tensor work; the caller's idle
    // OpenMP team (left by loading and slot allocation) would only slow it.
    ReleaseThreadTeam();
    std::promise<void> warmed_up;
    std::future<void> done = warmed_up.get_future();
    thread_ = std::thread([this, warmed_up = std::move(warmed_up)]() mutable {
      pthread_setname_np(pthread_self(), "attn-engine");  // as top -H and /proc show it
      if (!options_.cpus.empty()) {
        // Validated at startup; should the mask change meanwhile, run unpinned.
        const absl::Status pinned = PinCallingThread(options_.cpus);
        if (!pinned.ok()) {
          std::fprintf(stderr, "warning: engine thread not pinned: %s\n",
                       std::string(pinned.message()).c_str());
        }
      }
      // Wall time for the operator's log, whatever clock drives the engine.
      const absl::Time warm_up_start = absl::Now();
      warm_up_.tokens = WarmUp();
      warm_up_.time = absl::Now() - warm_up_start;
      warmed_up.set_value();
      Loop();
    });
    done.wait();
  }
  EngineWarmUp warm_up() const { return warm_up_; }
  void Drain() {
    {
      absl::MutexLock lock(&mu_);
      draining_ = true;
    }
    draining_published_ = true;
    absl::MutexLock wake(&published_mu_);  // AwaitLoad's waiters look again
  }
  void Stop(const absl::Status& status);
  EngineLoad load() const {
    return {running_.load(),       waiting_count_.load(), state_bytes_in_use_.load(),
            cache_entries_.load(), cache_bytes_.load(),   draining_published_.load(),
            teams_released_.load()};
  }
  int64_t bytes_per_slot() const { return backend_->bytes_per_row(); }
  int64_t budget() const { return budget_; }
  bool WaitIdle(absl::Time deadline) const {
    absl::MutexLock lock(&published_mu_);
    return published_mu_.AwaitWithDeadline(absl::Condition(this, &Impl::Idle), deadline);
  }
  bool AwaitLoad(const std::function<bool(const EngineLoad&)>& done, absl::Time deadline) const {
    auto holds = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return done(load()); };
    absl::MutexLock lock(&published_mu_);
    return published_mu_.AwaitWithDeadline(absl::Condition(&holds), deadline);
  }

 private:
  // `backend` holding `rows` rows; none (and a warning) if they cannot be
  // allocated, so that every request is refused instead of the process
  // failing. Loading the model allocates them first and reports failure.
  static std::unique_ptr<LmBackend> WithRows(std::unique_ptr<LmBackend> backend, int64_t rows) {
    if (backend->rows() == rows) return backend;
    if (absl::Status allocated = backend->AllocateRows(rows); !allocated.ok()) {
      std::fprintf(stderr, "warning: no state rows: %s\n",
                   std::string(allocated.message()).c_str());
      backend->AllocateRows(0).IgnoreError();
    }
    return backend;
  }
  // The draft model's drafter; none (and a warning) if its rows cannot be
  // allocated: the engine then decodes without it.
  static std::unique_ptr<ModelDrafter> MakeDrafter(const EngineOptions& options, int64_t rows,
                                                   int64_t ids, const Clock& clock) {
    absl::StatusOr<std::unique_ptr<ModelDrafter>> drafter =
        ModelDrafter::Create(options.draft_model, rows, options.prefill_chunk, ids, clock);
    if (drafter.ok()) return *std::move(drafter);
    std::fprintf(stderr, "warning: no draft model: %s\n",
                 std::string(drafter.status().message()).c_str());
    return nullptr;
  }
  // Returns the tokens it ran (0 if it failed).
  int64_t WarmUp();
  // The state bytes `request` may come to hold: at its longest context.
  int64_t Reservation(const EngineRequest& request) const {
    int64_t tokens = request.start_tokens + static_cast<int64_t>(request.prompt.size());
    if (request.kind == EngineRequest::Kind::kGenerate) tokens += request.max_tokens;
    const int64_t limit = backend_->max_context();
    return backend_->state_bytes_per_sequence(limit > 0 ? std::min(tokens, limit) : tokens);
  }
  // What the scheduler says of the running and the queued (engine.cc).
  bool EndAbandoned(absl::Time now);
  bool Admit(absl::Time now);

  // --- The executor (executor.cc): runs the steps the scheduler chose ---
  // Prefills one chunk of the scheduler's prefill group.
  bool PrefillChunk();
  void PushScores(Sequence& seq, const torch::Tensor& logits, int64_t begin, int64_t count);
  // Runs one decode step over the scheduler's decode batch.
  bool DecodeStep();
  // Handles a token chosen for `seq`; ends the sequence when it finishes.
  void Emit(Sequence& seq, const SampledToken& token) {
    Deliver(seq, token, seq.continuation->Accept(token.id));
  }
  // Emit for a token the continuation has accepted already.
  void Deliver(Sequence& seq, const SampledToken& token, const AcceptedToken& accepted);

  // One plain decode step of `batch`: each row feeds its next token and
  // samples the one after it.
  void PlainStep(const std::vector<Sequence*>& batch);

  // --- Speculative decoding (speculation.cc) ---
  // Whether `seq`, in a decode batch of `rows`, may draft now: not
  // finishing, a copy that stops growing (rolling back copies the row), a
  // plain step of that many rows timed, not backing off; a draft model
  // drafts only for a sequence decoding alone.
  bool MaySpeculate(const Sequence& seq, int64_t rows) const;
  // Drafts for `seq`'s next round, at most `limit` tokens: n-gram lookup
  // (if on), else the draft model (if any and `rows` is 1); empty when
  // neither has one.
  std::vector<int64_t> DraftFor(Sequence& seq, int64_t limit, int64_t rows,
                                std::optional<ModelDrafter::Drafts>* from_model);
  // After a round that emitted `emitted` tokens: the draft model's row
  // keeps what they confirm (nothing when from_model is empty).
  void SettleDraftModel(Sequence& seq, const std::optional<ModelDrafter::Drafts>& from_model,
                        int64_t emitted);
  // One decode iteration for `batch` with drafts: the rows that have some
  // check them, each row group in one prefill, and emit the tokens plain
  // decoding gives, each state left after the last token fed; the others
  // take a plain step. False, having done nothing, when no row drafts.
  bool Speculate(const std::vector<Sequence*>& batch);
  // Speculate's parts: a round's drafts and copy (none without drafts);
  // the checks of `rounds` (a failed one ends its sequence); each round's
  // judgement, adaptation and tokens, given the iteration's time spent
  // checking and in all.
  std::optional<SpeculationRound> StartRound(Sequence& seq, int64_t rows);
  void CheckRounds(std::vector<SpeculationRound>& rounds);
  void CheckGroup(std::vector<SpeculationRound>& rounds, const std::vector<size_t>& group);
  void FinishRounds(std::vector<SpeculationRound>& rounds, absl::Duration checking,
                    absl::Duration took, int64_t rows);
  // Whether the draft model may catch up on `seq`'s history now: a
  // catch-up longer than a round's own tokens (the prompt's, one after a
  // pause) is paid before any round can show the model agrees, so a
  // sequence's such catch-ups may take at most draft_prefill_share of its
  // plain decoding time (max_tokens plain steps of one row), estimated from
  // earlier catch-ups (or, before any, the served model's prefill). At
  // the default 3%, with the rounds' losses (held to about 5% by the
  // pauses, far less once the model stops), a draft model that never
  // agrees stays within about 5% of plain decoding.
  bool LagFits(const Sequence& seq) const;
  // A draft model's catch-up of `tokens` took `seconds` for `seq`.
  void NoteCatchUp(Sequence& seq, int64_t tokens, double seconds);
  // Whether `round` paid (its tokens came faster than plain steps of
  // `step_seconds` would have given them, after `round_seconds`), and what
  // its sequence drafts next.
  void Judge(SpeculationRound& round, double round_seconds, double step_seconds);
  // A plain decode step of `rows` rows took `took`: what a round at that
  // batch must beat.
  void NoteStep(int64_t rows, absl::Duration took) {
    if (rows > options_.speculative_max_batch) return;
    if (step_seconds_.size() <= static_cast<size_t>(rows)) step_seconds_.resize(rows + 1, -1);
    Average(step_seconds_[rows], absl::ToDoubleSeconds(took));
  }
  // After a speculative iteration of `rows` rows, some of which did not
  // draft, that took `took`: what they lost against a plain step of that
  // many rows, and how long drafting pauses at that batch size for it.
  void JudgeBatch(int64_t rows, absl::Duration took);
  // A prefill of `tokens` tokens in all took `took`: the draft model's
  // catch-ups are estimated from it until one was timed.
  void NotePrefill(int64_t tokens, absl::Duration took) {
    if (drafter_ == nullptr || tokens < kTimedTokens) return;
    Average(prefill_seconds_per_token_, absl::ToDoubleSeconds(took) / tokens);
  }
  static void Average(double& average, double seconds) {
    average = average > 0 ? 0.9 * average + 0.1 * seconds : seconds;
  }
  // The moving average of plain steps of `rows` rows, in seconds (0 on a
  // clock where they take no time); -1 until one ran.
  double StepSeconds(int64_t rows) const {
    return static_cast<size_t>(rows) < step_seconds_.size() ? step_seconds_[rows] : -1;
  }
  // Pushes the last event (with usage for a success) and frees the slot.
  void End(Sequence& seq, StreamEvent last);
  void EndWithError(Sequence& seq, const absl::Status& status) {
    StreamEvent last;
    last.status = status;
    End(seq, std::move(last));
  }
  void RemoveEnded();
  void PublishLoad();

  // --- State reuse (engine_state.cc) ---
  // A newly admitted sequence's starting point: the request's start state,
  // or the state cache's longest usable prefix of its prompt (when it holds
  // the whole prompt, the first token is sampled at once).
  void StartSequence(Sequence& seq);
  // Asks the shared tier for a prefix of `seq`'s prompt longer than what it
  // holds, when there is a tier and more than one token to prefill.
  void FetchFromStore(Sequence& seq);
  // Loads the tier's answers that came (or gives up on those past their
  // time); returns whether any sequence may now prefill.
  bool ApplyFetches(absl::Time now);
  // Hands the state after `tokens` of `seq` to the shared tier.
  void WriteToStore(const Sequence& seq, std::vector<int64_t> tokens, const SavedRow& row);
  // After a prefill chunk: caches the state at a checkpoint or the prompt's
  // end (with the logits after it).
  void SaveCheckpoint(Sequence& seq);
  // The prompt-end checkpoint PrefillChunk put off (Sequence::
  // end_checkpoint_due), if the sequence still holds its row.
  void TakeDueCheckpoint(Sequence& seq);
  // Whether a finished sequence's last token can still enter its state
  // (return_state), which the context may not have room for.
  bool CanFeedLast(const Sequence& seq) const;
  // At a successful end: the state into the cache and, for return_state,
  // into `last`. kInternal if it cannot be copied out.
  absl::Status SaveFinished(Sequence& seq, StreamEvent& last);
  // The tokens `seq`'s state covers (its start state's aside).
  std::vector<int64_t> StateTokens(const Sequence& seq) const;
  // Puts `state`, the state of `seq` after `tokens` that SaveRowOnto saved
  // continuing `base` (null: none), into the cache. When the save could not
  // extend base's memory (another sequence took the room behind it: a
  // second question about one document), the cached states of the
  // tokens' beginnings that view base's memory move onto the new copy
  // first (LmBackend::ViewOnto). Entries thus give base's memory back
  // only with the others viewing it, and the document's state stays.
  void CacheState(const Sequence& seq, absl::Span<const int64_t> tokens,
                  std::shared_ptr<CachedState> state, const SavedRow* base);
  void PublishCacheSize();

  std::unique_ptr<LmBackend> backend_;
  const Tokenizer& tokenizer_;
  // The vocabulary's bytes for grammars, built by the first constrained
  // request (on its caller's thread), then shared.
  absl::once_flag grammar_tokens_once_;
  std::shared_ptr<const grammar::TokenTrie> grammar_tokens_;
  const EngineOptions options_;
  const Clock& clock_;
  EngineObserver no_observer_;
  EngineObserver* observer_;
  torch::Device device_;
  RowPool pool_;          // engine thread only
  const int64_t rows_;    // pool_'s capacity, for any thread
  const int64_t budget_;  // EngineOptions::max_state_bytes, resolved
  int64_t reserved_ = 0;  // engine thread only: the admitted sequences' reservations
  std::vector<std::unique_ptr<Sequence>> active_;  // engine thread only, admission order
  std::shared_ptr<Signal> signal_ = std::make_shared<Signal>();
  std::thread thread_;

  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<Sequence>> waiting_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;

  std::unique_ptr<StateCache> cache_;  // engine thread only; null when off
  int64_t decode_steps_ = 0;           // engine thread only
  // Engine thread only: per batch size up to speculative_max_batch, a
  // moving average of plain decode steps' time (NoteStep), -1 until one
  // ran: rounds wait for one, so that each is judged against what plain
  // decoding spends.
  std::vector<double> step_seconds_;
  // Engine thread only, with a draft model: moving averages of the seconds
  // per token of the served model's prefills and of the draft model's
  // catch-ups, each over calls of at least kTimedTokens tokens (fewer time
  // mostly a call's fixed cost); -1 until one ran.
  static constexpr int64_t kTimedTokens = 8;
  double prefill_seconds_per_token_ = -1;
  double catch_up_seconds_per_token_ = -1;
  // Engine thread only: per batch size above 1, the speculative iterations
  // in a row that lost, and the decode step drafting resumes at.
  struct BatchJudgement {
    int64_t misses = 0;
    int64_t resume_at = 0;
  };
  std::vector<BatchJudgement> batch_judgements_;
  // Written by the engine thread before Start() returns, read after.
  EngineWarmUp warm_up_;

  std::atomic<int64_t> free_slots_;
  // A round's copy of a row stops growing with the context: speculation
  // pays at any length (RollsBackCheaply).
  const bool cheap_rollback_;
  std::unique_ptr<ModelDrafter> drafter_;  // engine thread only; null: no draft model
  std::atomic<int64_t> running_{0};
  std::atomic<int64_t> waiting_count_{0};
  std::atomic<int64_t> unfinished_{0};          // submitted, last event not yet pushed
  std::atomic<int64_t> state_bytes_in_use_{0};  // written by PublishLoad
  std::atomic<int64_t> cache_entries_{0};       // written by PublishCacheSize
  std::atomic<int64_t> cache_bytes_{0};
  std::atomic<bool> draining_published_{false};  // set by Drain
  std::atomic<int64_t> teams_released_{0};
  const Scheduler scheduler_;  // after options_, which it reads
  // Released by PublishLoad() after every iteration, which makes waiters
  // (WaitIdle, AwaitLoad) re-check their condition; guards no data.
  mutable absl::Mutex published_mu_;
  bool Idle() const { return unfinished_.load() == 0; }
};

}  // namespace attn::serving
