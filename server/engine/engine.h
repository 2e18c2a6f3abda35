// The continuous-batching engine of one model.
//
// One thread per model runs iterations. Each iteration:
//   1. ends requests that were cancelled or passed their deadline, freeing
//      their state slots;
//   2. admits waiting requests into free slots (first come, first served);
//   3. prefills ONE chunk of the oldest prompt still being read (the parallel
//      form), so a long prompt delays running streams by one chunk at most;
//      prompts at the same position that need a chunk of the same length
//      join that prefill as extra rows while the tokens fit the chunk;
//   4. decodes one token for the running sequences together: one step() on
//      their state slots, each sequence at its own position, each sampled by
//      its own seeded Sampler (so its output does not depend on its batch).
//      At most max_decode_rows sequences step per iteration; when more are
//      ready, those that have generated the fewest tokens go first (ties:
//      the one that waited longest). Under overload a new request therefore
//      gets its first tokens at once instead of waiting behind thousands of
//      long streams, and one iteration stays short enough for prefills,
//      cancellations and deadlines to be handled promptly.
// A sequence whose output queue is full (a slow reader) sits out decode steps
// while keeping its slot. Scoring runs the same prefill path over the text
// and reports each token's log-probability.
//
// All model work happens on the engine thread; callers only queue requests
// and read RequestStreams. Thread-safe.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "model/lm/continuation.h"
#include "model/lm/sampling.h"
#include "server/engine/request_stream.h"
#include "server/state/sequence_origin.h"
#include "util/clock.h"

namespace attn {
struct SavedRow;
class Tokenizer;
class CausalLm;
class LmBackend;
}  // namespace attn

namespace attn::serving {

class DeliveryThread;
class StateStore;

// What a request may ask of one model. The one source of these bounds:
// attn-server's flags fill it, the model registry sets max_context per
// model, and request validation and the engine both read it from the
// engine's options.
struct RequestLimits {
  int64_t max_prompt_tokens = 4096;                // prompt (or scored text) tokens per request
  int64_t max_tokens = 4096;                       // the largest max_tokens a request may ask for
  int64_t default_max_tokens = kDefaultMaxTokens;  // max_tokens when a request leaves it unset
  int64_t max_stop_strings = 16;                   // stop strings per request
  int64_t max_context = 0;                         // the model's context in tokens; 0: unbounded
};

// How the engine drafts tokens to check several at once: not at all, or
// from the sequence's own prompt and output (n-gram lookup).
enum class Speculation { kOff, kNgram };
const char* SpeculationName(Speculation speculation);  // "off", "ngram"
// The most tokens one speculative round drafts (EngineOptions::draft_tokens).
inline constexpr int64_t kMaxDraftTokens = 32;
// The largest EngineOptions::draft_prefill_share: a draft model's prefill
// may take this many times the plain decoding it is meant to speed up.
inline constexpr double kMaxDraftPrefillShare = 100;
// kInvalidArgument naming the flag for anything else.
absl::Status ParseSpeculation(absl::string_view name, Speculation* speculation);

// Prompt tokens an engine iteration prefills by default: on a CPU a chunk
// of 256 already keeps every core busy in matrix products, and more only
// delays the running streams' next token; a GPU's products need more rows
// before they stop waiting on memory (docs/model.md, "CUDA kernels").
inline constexpr int64_t kCpuPrefillChunk = 256;
inline constexpr int64_t kGpuPrefillChunk = 2048;
// --prefill_chunk's value: `flag`, or for 0 the default for `device`
// ("cpu", "cuda", "cuda:N").
int64_t PrefillChunkFor(int64_t flag, const std::string& device);

struct EngineOptions {
  int64_t max_active = 256;                  // state slots: sequences running at once
  int64_t max_waiting = 1024;                // queued beyond them; more: RESOURCE_EXHAUSTED
  int64_t prefill_chunk = kCpuPrefillChunk;  // prompt tokens per iteration
  int64_t max_decode_rows = 256;             // sequences per decode step
  int64_t stream_buffer = 16;                // events a stream queues before its sequence pauses
                                             // (the capacity callers give RequestStreams)
  // Tokens per streamed message after the first, which always goes out at
  // once. 1 streams every token; more send fewer, larger messages, trading
  // smoothness for throughput where per-message cost matters (each message
  // costs CPU in the server and the client).
  int64_t stream_interval = 1;
  // CPUs the engine thread and its intra-op threads run on; empty: wherever
  // the process may run. Startup validates them (PinCallingThread).
  std::vector<int> cpus;
  // State memory the running sequences may hold at the most. Each admitted
  // request reserves what its state holds at its longest context (prompt
  // plus max_tokens, within the model's); one that does not fit waits, and
  // one that could never fit is refused with RESOURCE_EXHAUSTED. 0:
  // max_active rows at the model's longest context, the most the pool holds.
  int64_t max_state_bytes = 0;
  // The largest state that leaves the process: returned to a client
  // (return_state) or written to the shared tier (state_store). A hybrid's
  // state holds its attention layers' key/value prefix, which grows with
  // the context, and the recurrent part alone cannot resume; so a
  // return_state request whose state at its longest context would exceed
  // this is refused with INVALID_ARGUMENT, and larger states are not
  // written to the tier (attn-server's --max_exported_state_bytes). 0: no
  // bound.
  int64_t max_exported_state_bytes = int64_t{64} << 20;
  RequestLimits limits;
  // The state cache (server/state/state_cache.h): the bytes it may hold, 0 for
  // none (attn-server's --state_cache_bytes; the registry turns it off for
  // the models --state_cache leaves out). With it, a generation request starts from the state at
  // the longest cached prefix of its prompt, and leaves the state at its prompt's end, every
  // state_cache_interval prompt tokens, and at its finish for later requests.
  int64_t state_cache_bytes = int64_t{256} << 20;
  int64_t state_cache_interval = 256;
  // The shared state tier (server/state/state_store.h; not owned, null:
  // none) and the model's fingerprint its entries carry. With it, a
  // generation request whose prompt the state cache does not hold whole
  // waits up to the tier's time budget, without holding up the engine, for
  // a longer stored prefix; states at prompts' ends and finished
  // generations are written to it.
  StateStore* state_store = nullptr;
  std::string state_fingerprint;
  // Speculative decoding (server/engine/speculation.cc; attn-server's
  // --speculative, --draft_tokens and --speculative_max_batch). With
  // kNgram, a sequence in a decode batch of at most speculative_max_batch
  // rows drafts up to draft_tokens tokens by finding its last few tokens
  // earlier in its prompt and output, and the batch's drafts are checked in
  // one prefill: the output is the tokens plain decoding gives, seeded
  // sampling included. Each sequence's rounds are judged against the
  // measured plain step at that batch size, and pause while they do not
  // pay. Off by default, as in llama.cpp's and vLLM's servers.
  Speculation speculative = Speculation::kOff;
  int64_t draft_tokens = 8;
  int64_t speculative_max_batch = 2;
  // A smaller model with the same vocabulary that drafts when n-gram lookup
  // (if on) finds nothing (attn-server's --draft_model; server/engine/
  // model_draft.h): it decodes draft_tokens tokens greedily ahead of a
  // sequence decoding alone (its own steps are one row each). The engine
  // gives it max_active rows of its own. Null: none.
  std::shared_ptr<LmBackend> draft_model;
  // The most of a sequence's plain decoding time (max_tokens plain steps
  // of one row) the draft model may spend reading its prompt, and the
  // tokens of its pauses, before its rounds can show that they pay
  // (attn-server's --draft_prefill_share): a sequence whose prompt would
  // take longer decodes without it.
  double draft_prefill_share = 0.03;

  // kInvalidArgument naming the first field out of range, by the name of
  // attn-server's flag for it ("max_active: must be at least 1, got 0").
  absl::Status Validate() const;
};

// Which front end a request came through: its label in metrics.
enum class Protocol { kGrpc, kHttp };
const char* ProtocolName(Protocol protocol);  // "grpc", "http"

struct EngineRequest {
  enum class Kind { kGenerate, kScore };
  Kind kind = Kind::kGenerate;
  Protocol protocol = Protocol::kGrpc;
  std::vector<int64_t> prompt;  // valid ids; scoring: the text to score
  int64_t max_tokens = 0;       // generation; 0: limits.default_max_tokens
  SamplingOptions sampling;
  std::vector<std::string> stop;
  std::vector<int64_t> stop_token_ids;  // end the sequence as eos does (ContinuationOptions)
  bool logprobs = false;
  bool ignore_eos = false;
  absl::Time deadline = absl::InfiniteFuture();
  // Generation only. A sequence to continue instead of the empty one (a
  // client's GenerateRequest.state): `prompt` is then only the new tokens,
  // and the start state's `start_tokens` count against the context.
  std::shared_ptr<const SavedRow> start_state;
  int64_t start_tokens = 0;
  // Generation only: the last event of a success carries the state after
  // every token of the sequence (StreamEvent::state) and its tokens
  // (state_token_ids); with return_state_tokens alone, the tokens only (the
  // responses API renders the next turn from them; the state stays here).
  bool return_state = false;
  bool return_state_tokens = false;
  // Generation only, not with start_state: a named initial state of the
  // model (--initial_states) the sequence starts from instead of the empty
  // one. Its tokens are none of the request's (start_tokens stays 0), so its
  // sequences use the state cache, under `cache_origin`
  // (kEmptySequenceOrigin for the empty sequence).
  std::shared_ptr<const SavedRow> initial_state;
  uint64_t cache_origin = kEmptySequenceOrigin;
  // Generation only: structured output's grammar (model/grammar/), which
  // every generated token must keep; null: none.
  std::shared_ptr<const grammar::Grammar> grammar;
};

// EngineOptions::max_state_bytes resolved for a model whose state slot
// holds at most `bytes_per_slot`: the budget, never more than the pool.
int64_t StateBudget(const EngineOptions& options, int64_t bytes_per_slot);

// Hooks for metrics; every method runs on the engine thread.
class EngineObserver {
 public:
  enum class Phase { kPrefill, kDecode };
  virtual ~EngineObserver() = default;
  // Per request, with the protocol it came through.
  virtual void OnAdmitted(Protocol /*protocol*/, absl::Duration /*queue_time*/) {}
  virtual void OnFirstToken(Protocol /*protocol*/, absl::Duration /*since_arrival*/) {}
  virtual void OnNextToken(Protocol /*protocol*/, absl::Duration /*since_previous*/) {}
  virtual void OnFinished(Protocol /*protocol*/, const StreamEvent& /*last*/,
                          absl::Duration /*since_arrival*/) {}
  virtual void OnStep(Phase /*phase*/, absl::Duration /*took*/, int64_t /*rows*/,
                      int64_t /*tokens*/) {}
  virtual void OnLoad(int64_t /*running*/, int64_t /*waiting*/, int64_t /*state_bytes*/) {}
  // A generation request's state cache lookup: `reused` of its `prompt`
  // tokens came from the cache (0: a miss).
  virtual void OnCacheLookup(int64_t /*reused*/, int64_t /*prompt*/) {}
  // The cache's size after it changed.
  virtual void OnCacheSize(int64_t /*entries*/, int64_t /*bytes*/) {}
  // A constrained sequence's step: the time its grammar's mask took.
  virtual void OnGrammarMask(absl::Duration /*took*/) {}
  // A speculative round: `drafted` tokens checked, the first `accepted` of
  // them the model's own choices.
  virtual void OnSpeculation(int64_t /*drafted*/, int64_t /*accepted*/) {}
};

struct EngineLoad {
  int64_t running = 0;  // holding a state slot
  int64_t waiting = 0;  // queued for one
  // What the running sequences' states hold at their current lengths
  // (LmBackend::state_bytes_per_sequence); a cache grows with its context.
  int64_t state_bytes_in_use = 0;
  int64_t cache_entries = 0;  // in the state cache
  int64_t cache_bytes = 0;
  bool draining = false;  // Drain() ran: new requests are refused
  // Times the idle engine handed its thread team back (engine.cc).
  int64_t teams_released = 0;
};

struct EngineWarmUp {
  absl::Duration time = absl::ZeroDuration();
  int64_t tokens = 0;  // prompt tokens prefilled and decode steps run; 0 if it failed
};

class Engine {
 public:
  // Runs the model through `backend` (model/backend/backend.h), which gets
  // options.max_active state rows. `tokenizer` must outlive the engine. The
  // observer may be null.
  Engine(std::unique_ptr<LmBackend> backend, const Tokenizer& tokenizer,
         const EngineOptions& options, const Clock& clock = RealClock(),
         EngineObserver* observer = nullptr);
  // The same with the native backend of `model`.
  Engine(CausalLm model, const Tokenizer& tokenizer, const EngineOptions& options,
         const Clock& clock = RealClock(), EngineObserver* observer = nullptr);
  ~Engine();  // Stop()s
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // A stream for one request's events, as deep as options().stream_buffer
  // (a slow reader's sequence pauses when it is full). `delivery` runs its
  // listener (RequestStream); null: the engine thread does.
  std::shared_ptr<RequestStream> NewStream(DeliveryThread* delivery = nullptr) const;

  // Queues a request that validation (server/core/validation.h) has checked and
  // completed. Events arrive on `stream`; the last one carries the outcome.
  // Returns, with nothing queued:
  //   kResourceExhausted  the waiting queue is full; or the request's state
  //                       reservation (prompt plus max_tokens) exceeds the
  //                       model's budget (--max_state_bytes); or the model
  //                       has no state rows (they could not be allocated);
  //   kUnavailable        the engine is draining (shutdown has begun);
  //   kInternal           the request breaks what validation guarantees (an
  //                       empty prompt, max_tokens below 1, start tokens
  //                       without a start state): a bug in the caller.
  // A start state that does not fit the model fails the request later, on
  // its stream, with kInvalidArgument naming "state".
  absl::Status Submit(EngineRequest request, std::shared_ptr<RequestStream> stream);

  // Runs iterations on an own thread until Stop(). Also releases the calling
  // thread's idle OpenMP team (ReleaseThreadTeam in util/cpus.h), and the
  // engine thread releases its own after an idle wait (about 20 ms without
  // work), so that idle engines do not slow a busy one. Returns
  // once that thread has warmed up: a short prefill and two decode steps on
  // a scratch slot, which pack the weights, start the intra-op threads and
  // grow the allocator, so that the first request does not pay for them.
  // The warm-up is no request: the observer hears nothing of it.
  void Start();
  // What Start()'s warm-up did (zeros before Start).
  EngineWarmUp warm_up() const;
  // Refuses new work; running and waiting requests go on.
  void Drain();
  // Waits until no request is left or `deadline` passes; true when idle.
  bool WaitIdle(absl::Time deadline);
  // Waits until `done(load())` holds or `deadline` passes; returns whether
  // it held. Re-checked whenever the engine publishes its load (after every
  // iteration, and at least every 20 ms while its thread runs).
  bool AwaitLoad(const std::function<bool(const EngineLoad&)>& done, absl::Time deadline) const;
  // Ends every request left with `status` and joins the thread.
  void Stop(const absl::Status& status = absl::UnavailableError("the server is shutting down"));

  // One iteration, for tests that drive the engine without its thread.
  // Returns whether it did any work.
  bool RunOnce();

  EngineLoad load() const;
  const EngineOptions& options() const { return options_; }
  int64_t state_bytes_per_slot() const;
  // The state memory budget (EngineOptions::max_state_bytes, resolved).
  int64_t state_budget_bytes() const;

 private:
  class Impl;
  EngineOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attn::serving
