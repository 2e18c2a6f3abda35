#include "server/engine/engine.h"

#include <pthread.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "model/backend/backend.h"
#include "model/backend/native_backend.h"
#include "model/backend/row_pool.h"
#include "model/lm/continuation.h"
#include "model/text/tokenizer.h"
#include "server/engine/engine_impl.h"
#include "util/cpus.h"
#include "util/field_error.h"

namespace attn::serving {
namespace {

// `context_limit`: the model's (-1: unbounded), of which a start state
// has used its tokens.
ContinuationOptions ContinuationOptionsFor(const EngineRequest& request, int64_t context_limit,
                                           std::shared_ptr<const grammar::TokenTrie> tokens) {
  ContinuationOptions options;
  if (request.grammar) {
    options.grammar = request.grammar;
    options.grammar_tokens = std::move(tokens);
  }
  if (context_limit > 0) context_limit -= request.start_tokens;
  options.max_tokens = request.max_tokens;
  options.stop = request.stop;
  options.ignore_eos = request.ignore_eos;
  options.stop_token_ids = request.stop_token_ids;
  options.context_limit = context_limit;
  options.sampling = request.sampling;
  return options;
}

}  // namespace

const char* SpeculationName(Speculation speculation) {
  return speculation == Speculation::kNgram ? "ngram" : "off";
}

absl::Status ParseSpeculation(absl::string_view name, Speculation* speculation) {
  for (Speculation candidate : {Speculation::kOff, Speculation::kNgram}) {
    if (name == SpeculationName(candidate)) {
      *speculation = candidate;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("speculative: expected off or ngram, got \"", name, "\""));
}

int64_t PrefillChunkFor(int64_t flag, const std::string& device) {
  if (flag != 0) return flag;  // a negative one is refused by Validate, naming the flag
  return absl::StartsWith(device, "cuda") ? kGpuPrefillChunk : kCpuPrefillChunk;
}

absl::Status EngineOptions::Validate() const {
  const struct {
    const char* name;
    int64_t value, min;
  } bounds[] = {{"max_active", max_active, 1},
                {"max_waiting", max_waiting, 0},
                {"prefill_chunk", prefill_chunk, 1},
                {"max_decode_rows", max_decode_rows, 1},
                {"stream_buffer", stream_buffer, 1},
                {"stream_interval", stream_interval, 1},
                {"max_prompt_tokens", limits.max_prompt_tokens, 1},
                {"max_tokens", limits.max_tokens, 1},
                {"default_max_tokens", limits.default_max_tokens, 1},
                {"max_state_bytes", max_state_bytes, 0},
                {"max_exported_state_bytes", max_exported_state_bytes, 0},
                {"max_stop_strings", limits.max_stop_strings, 0},
                {"max_context", limits.max_context, 0},
                {"state_cache_bytes", state_cache_bytes, 0},
                {"state_cache_interval", state_cache_interval, 1},
                {"draft_tokens", draft_tokens, 1},
                {"speculative_max_batch", speculative_max_batch, 1}};
  for (const auto& bound : bounds) {
    if (bound.value < bound.min) {
      return InvalidField(bound.name, "must be at least ", bound.min, ", got ", bound.value);
    }
  }
  if (draft_tokens > kMaxDraftTokens) {
    return InvalidField("draft_tokens", "must be at most ", kMaxDraftTokens, ", got ",
                        draft_tokens);
  }
  if (!(draft_prefill_share >= 0 && draft_prefill_share <= kMaxDraftPrefillShare)) {
    return InvalidField("draft_prefill_share", "must be in [0, ", kMaxDraftPrefillShare, "], got ",
                        draft_prefill_share);
  }
  if (limits.default_max_tokens > limits.max_tokens) {
    return InvalidField("default_max_tokens", limits.default_max_tokens, " exceeds max_tokens (",
                        limits.max_tokens, ")");
  }
  return absl::OkStatus();
}

int64_t StateBudget(const EngineOptions& options, int64_t bytes_per_slot) {
  const int64_t most = options.max_active * bytes_per_slot;
  return options.max_state_bytes > 0 ? std::min(options.max_state_bytes, most) : most;
}

absl::Status Engine::Impl::Submit(EngineRequest request, std::shared_ptr<RequestStream> stream) {
  // Validation (server/core/validation.h) checked the request against the limits
  // and filled in its defaults; these guard the engine's own invariants
  // against a caller that skipped it.
  const bool generate = request.kind == EngineRequest::Kind::kGenerate;
  if (request.prompt.empty() || (generate && request.max_tokens < 1) ||
      (!generate && (request.start_state || request.initial_state)) ||
      (request.start_state && request.initial_state) || request.start_tokens < 0 ||
      (request.start_tokens > 0 && !request.start_state)) {
    return absl::InternalError(
        "an unvalidated request reached the engine (empty prompt, max_tokens below 1, a start "
        "state without its tokens or with an initial state); see server/core/validation.h");
  }
  if (rows_ == 0) {  // WithRows could not allocate them: nothing would ever run
    return absl::ResourceExhaustedError(
        "the model has no state rows (they could not be allocated at start-up; see its log)");
  }
  if (request.grammar) {
    absl::call_once(grammar_tokens_once_,
                    [this] { grammar_tokens_ = GrammarVocabulary(tokenizer_); });
  }
  auto seq = std::make_unique<Sequence>();
  seq->request = std::move(request);
  seq->stream = std::move(stream);
  seq->arrival = clock_.Now();
  seq->reservation = Reservation(seq->request);
  if (seq->reservation > budget_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the request may hold ", seq->reservation, " bytes of state (its prompt plus max_tokens), ",
        "more than the model's budget of ", budget_, " (--max_state_bytes); ask for fewer tokens"));
  }
  const int64_t exported = options_.max_exported_state_bytes;
  if (seq->request.return_state && exported > 0 && seq->reservation > exported) {
    return absl::InvalidArgumentError(absl::StrCat(
        "return_state: the state at the request's longest context (prompt plus max_tokens) "
        "would be ",
        seq->reservation, " bytes, more than the ", exported,
        " a server returns (--max_exported_state_bytes); the model's key/value prefix grows "
        "with the context and its recurrent part alone cannot resume. Ask for fewer tokens, "
        "or leave return_state off"));
  }
  {
    absl::MutexLock lock(&mu_);
    if (draining_) return absl::UnavailableError("the server is shutting down; retry elsewhere");
    const int64_t room = options_.max_waiting + free_slots_.load();
    if (static_cast<int64_t>(waiting_.size()) >= room) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the model's queue is full (", options_.max_active, " running, ",
                       options_.max_waiting, " waiting); retry later"));
    }
    std::weak_ptr<Signal> signal = signal_;
    seq->stream->SetWake([signal] {
      if (auto s = signal.lock()) s->Wake();
    });
    waiting_.push_back(std::move(seq));
    waiting_count_ = static_cast<int64_t>(waiting_.size());
    ++unfinished_;
  }
  signal_->Wake();
  return absl::OkStatus();
}

bool Engine::Impl::RunOnce() {
  torch::InferenceMode inference;
  const absl::Time now = clock_.Now();
  bool worked = EndAbandoned(now);
  worked |= Admit(now);
  worked |= ApplyFetches(now);
  worked |= PrefillChunk();
  worked |= DecodeStep();
  RemoveEnded();
  PublishLoad();
  return worked;
}

int64_t Engine::Impl::WarmUp() {
  torch::InferenceMode inference;
  auto slot = pool_.Acquire();
  if (!slot.ok()) return 0;  // no slots: nothing will ever run
  // Without this the first request pays for packing, thread start-up and
  // allocator growth (docs/benchmarks-log.md). Within a short context limit the
  // prompt shrinks; the tokens are id 0, which every vocabulary has.
  const int64_t limit = backend_->max_context();
  int64_t prompt = std::min<int64_t>(16, options_.prefill_chunk), steps = 2;
  if (limit > 0) {
    prompt = std::min(prompt, limit / 2);
    steps = std::min(steps, limit - prompt);
  }
  const torch::Tensor slots = torch::tensor({*slot}, torch::kLong).to(device_);
  absl::Status warmed = absl::OkStatus();
  if (prompt > 0) {
    warmed = backend_
                 ->Prefill(torch::zeros({1, prompt}, torch::kLong).to(device_), slots,
                           PrefillLogits::kLast)
                 .status();
  }
  for (int64_t i = 0; i < steps && warmed.ok(); ++i) {
    warmed = backend_->Step(torch::zeros({1}, torch::kLong).to(device_), slots).status();
  }
  int64_t tokens = prompt + steps;
  if (!warmed.ok()) {
    // Whatever failed here fails the first request too, which reports it.
    std::fprintf(stderr, "warning: the engine's warm-up failed: %s\n",
                 std::string(warmed.message()).c_str());
    tokens = 0;
  }
  pool_.Release(*slot).IgnoreError();  // the slot is ours: cannot fail
  return tokens;
}

bool Engine::Impl::EndAbandoned(absl::Time now) {
  const auto ended = scheduler_.Abandoned(active_, now);
  for (const auto& [seq, reason] : ended) EndWithError(*seq, reason);
  return !ended.empty();
}

bool Engine::Impl::Admit(absl::Time now) {
  Scheduler::Admissions admissions;
  {
    absl::MutexLock lock(&mu_);
    admissions =
        scheduler_.Admit(&waiting_, now, pool_.capacity() - pool_.in_use(), budget_, &reserved_);
    free_slots_ =
        pool_.capacity() - pool_.in_use() - static_cast<int64_t>(admissions.admitted.size());
    waiting_count_ = static_cast<int64_t>(waiting_.size());
  }
  for (auto& [seq, reason] : admissions.dropped) EndWithError(*seq, reason);
  for (auto& seq : admissions.admitted) {
    seq->slot = pool_.Acquire().value();  // the scheduler counted free slots
    seq->continuation = std::make_unique<Continuation>(
        tokenizer_, seq->request.prompt,
        ContinuationOptionsFor(seq->request, backend_->max_context(), grammar_tokens_));
    observer_->OnAdmitted(seq->request.protocol, now - seq->arrival);
    active_.push_back(std::move(seq));
    StartSequence(*active_.back());
  }
  free_slots_ = pool_.capacity() - pool_.in_use();
  running_ = static_cast<int64_t>(active_.size());
  return !admissions.admitted.empty() || !admissions.dropped.empty();
}

void Engine::Impl::PublishLoad() {
  running_ = static_cast<int64_t>(active_.size());
  // What the running sequences' states hold at their lengths: a cache row
  // is backed by memory only as far as it is written.
  int64_t bytes = 0;
  for (const auto& seq : active_) {
    if (seq->stream) {
      bytes += backend_->state_bytes_per_sequence(seq->request.start_tokens + seq->prefilled +
                                                  seq->generated);
    }
  }
  state_bytes_in_use_ = bytes;
  observer_->OnLoad(running_, waiting_count_, bytes);
  absl::MutexLock wake_waiters(&published_mu_);
}

void Engine::Impl::Loop() {
  // Whether this thread's OpenMP team may exist (warm-up made one).
  bool holds_team = true;
  while (true) {
    bool worked = false;
    try {
      worked = RunOnce();
    } catch (const std::exception& error) {
      // Nothing in an iteration should throw past the model calls; if it
      // does, fail the running requests instead of the process.
      for (auto& seq : active_) {
        if (seq->stream) EndWithError(*seq, absl::InternalError(error.what()));
      }
      RemoveEnded();
    }
    holds_team = holds_team || worked;
    bool woken = false;
    {
      absl::MutexLock lock(&signal_->mu);
      if (signal_->stopping) return;
      woken = signal_->woken;
      if (!worked && !woken) {
        // The timeout bounds how late a deadline is noticed while idle.
        woken = signal_->mu.AwaitWithTimeout(
            absl::Condition(signal_.get(), &Signal::WokenOrStopping), absl::Milliseconds(20));
      }
      signal_->woken = false;
    }
    if (!worked && !woken && holds_team) {
      // A whole wait passed without work: hand the team back. libgomp counts
      // the threads of every thread's team; with several models hosted, idle
      // engines' teams push the count over the CPUs, and then every team
      // sleeps on a futex between parallel ops instead of spinning, so the
      // busy engine paid for the idle ones (docs/benchmarks-log.md). The next
      // parallel op builds a new team.
      ReleaseThreadTeam();
      holds_team = false;
      ++teams_released_;
      absl::MutexLock wake(&published_mu_);  // AwaitLoad's waiters look again
    }
  }
}

void Engine::Impl::Stop(const absl::Status& status) {
  {
    absl::MutexLock lock(&signal_->mu);
    signal_->stopping = true;
  }
  if (thread_.joinable()) thread_.join();
  std::deque<std::unique_ptr<Sequence>> waiting;
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    waiting.swap(waiting_);
    waiting_count_ = 0;
  }
  for (auto& seq : waiting) EndWithError(*seq, status);
  for (auto& seq : active_) {
    if (seq->stream) EndWithError(*seq, status);
  }
  RemoveEnded();
  PublishLoad();
}

Engine::Engine(std::unique_ptr<LmBackend> backend, const Tokenizer& tokenizer,
               const EngineOptions& options, const Clock& clock, EngineObserver* observer)
    : options_(options),
      impl_(std::make_unique<Impl>(std::move(backend), tokenizer, options, clock, observer)) {}

Engine::Engine(CausalLm model, const Tokenizer& tokenizer, const EngineOptions& options,
               const Clock& clock, EngineObserver* observer)
    : Engine(std::make_unique<NativeBackend>(std::move(model)), tokenizer, options, clock,
             observer) {}

Engine::~Engine() { Stop(); }

const char* ProtocolName(Protocol protocol) {
  return protocol == Protocol::kHttp ? "http" : "grpc";
}

std::shared_ptr<RequestStream> Engine::NewStream(DeliveryThread* delivery) const {
  return std::make_shared<RequestStream>(static_cast<size_t>(options_.stream_buffer), delivery);
}

absl::Status Engine::Submit(EngineRequest request, std::shared_ptr<RequestStream> stream) {
  return impl_->Submit(std::move(request), std::move(stream));
}
void Engine::Start() { impl_->Start(); }
EngineWarmUp Engine::warm_up() const { return impl_->warm_up(); }
void Engine::Drain() { impl_->Drain(); }
void Engine::Stop(const absl::Status& status) { impl_->Stop(status); }
bool Engine::RunOnce() { return impl_->RunOnce(); }
EngineLoad Engine::load() const { return impl_->load(); }
int64_t Engine::state_bytes_per_slot() const { return impl_->bytes_per_slot(); }
int64_t Engine::state_budget_bytes() const { return impl_->budget(); }

bool Engine::WaitIdle(absl::Time deadline) { return impl_->WaitIdle(deadline); }
bool Engine::AwaitLoad(const std::function<bool(const EngineLoad&)>& done,
                       absl::Time deadline) const {
  return impl_->AwaitLoad(done, deadline);
}

}  // namespace attn::serving
