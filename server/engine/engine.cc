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

// Rows one sampling task takes: below twice this, a decode step samples on
// its own thread, where waking another would cost more than it saves.
constexpr int64_t kRowsPerSamplingTask = 8;

// `context_limit`: the model's (-1: unbounded), of which a start state
// has used its tokens.
ContinuationOptions ContinuationOptionsFor(const EngineRequest& request, int64_t context_limit) {
  ContinuationOptions options;
  if (context_limit > 0) context_limit -= request.start_tokens;
  options.max_tokens = request.max_tokens;
  options.stop = request.stop;
  options.ignore_eos = request.ignore_eos;
  options.context_limit = context_limit;
  options.sampling = request.sampling;
  return options;
}

std::vector<float> RowToVector(const torch::Tensor& row) {
  torch::Tensor cpu = row.to(torch::kCPU, torch::kFloat).contiguous();
  return std::vector<float>(cpu.data_ptr<float>(), cpu.data_ptr<float>() + cpu.numel());
}

}  // namespace

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
                {"max_stop_strings", limits.max_stop_strings, 0},
                {"max_context", limits.max_context, 0},
                {"state_cache_bytes", state_cache_bytes, 0},
                {"state_cache_interval", state_cache_interval, 1}};
  for (const auto& bound : bounds) {
    if (bound.value < bound.min) {
      return InvalidField(bound.name, "must be at least ", bound.min, ", got ", bound.value);
    }
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
  // allocator growth (docs/benchmarks.md). Within a short context limit the
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
  bool ended = false;
  for (auto& seq : active_) {
    if (!seq->stream) continue;
    if (seq->stream->cancelled()) {
      EndWithError(*seq, absl::CancelledError("the client cancelled the request"));
      ended = true;
    } else if (now >= seq->request.deadline) {
      EndWithError(*seq, absl::DeadlineExceededError("the request's deadline passed"));
      ended = true;
    }
  }
  return ended;
}

bool Engine::Impl::Admit(absl::Time now) {
  std::vector<std::unique_ptr<Sequence>> admitted;
  std::vector<std::unique_ptr<Sequence>> dropped;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      Sequence& seq = **it;
      if (seq.stream->cancelled() || now >= seq.request.deadline) {
        dropped.push_back(std::move(*it));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
    // First come, first served: the front waits for room in the state
    // budget, and nothing overtakes it.
    while (!waiting_.empty() && pool_.in_use() < pool_.capacity() &&
           reserved_ + waiting_.front()->reservation <= budget_) {
      reserved_ += waiting_.front()->reservation;
      admitted.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
      free_slots_ = pool_.capacity() - pool_.in_use() - static_cast<int64_t>(admitted.size());
      if (free_slots_ == 0) break;
    }
    waiting_count_ = static_cast<int64_t>(waiting_.size());
  }
  for (auto& seq : dropped) {
    if (seq->stream->cancelled()) {
      EndWithError(*seq, absl::CancelledError("the client cancelled the request"));
    } else {
      EndWithError(*seq, absl::DeadlineExceededError("the request's deadline passed while queued"));
    }
  }
  for (auto& seq : admitted) {
    seq->slot = pool_.Acquire().value();  // free_slots_ said there is one
    seq->continuation = std::make_unique<Continuation>(
        tokenizer_, seq->request.prompt,
        ContinuationOptionsFor(seq->request, backend_->max_context()));
    observer_->OnAdmitted(seq->request.protocol, now - seq->arrival);
    active_.push_back(std::move(seq));
    StartSequence(*active_.back());
  }
  free_slots_ = pool_.capacity() - pool_.in_use();
  running_ = static_cast<int64_t>(active_.size());
  return !admitted.empty() || !dropped.empty();
}

std::vector<Sequence*> Engine::Impl::PrefillGroup() const {
  std::vector<Sequence*> group;
  int64_t count = 0;
  for (const auto& candidate : active_) {
    if (!candidate->stream || !candidate->prefilling() || candidate->fetching()) continue;
    const int64_t chunk = ChunkLength(*candidate);
    if (group.empty()) {
      group.push_back(candidate.get());
      count = chunk;
      if (candidate->scoring()) break;  // scored alone: it reports every position
      continue;
    }
    // Rows of one prefill share a position and a chunk length; the tokens of
    // the whole group stay within one chunk's budget.
    if (!candidate->scoring() &&
        candidate->request.start_tokens + candidate->prefilled ==
            group[0]->request.start_tokens + group[0]->prefilled &&
        chunk == count &&
        static_cast<int64_t>(group.size() + 1) * count <= options_.prefill_chunk) {
      group.push_back(candidate.get());
    }
  }
  return group;
}

void Engine::Impl::PushScores(Sequence& seq, const torch::Tensor& logits, int64_t begin,
                              int64_t count) {
  const auto& prompt = seq.request.prompt;
  torch::Tensor log_probs = torch::log_softmax(logits.to(torch::kFloat), -1).to(torch::kCPU);
  StreamEvent event;
  event.token_ids.assign(prompt.begin() + begin, prompt.begin() + begin + count);
  event.logprobs.resize(count);
  const auto& last = seq.last_logits;  // the previous chunk's prediction
  event.logprobs[0] = begin == 0
                          ? 0.0f
                          : static_cast<float>(LogSoftmaxAt(
                                last.data(), static_cast<int64_t>(last.size()), prompt[begin]));
  auto rows = log_probs.accessor<float, 2>();
  for (int64_t j = 0; j + 1 < count; ++j) event.logprobs[j + 1] = rows[j][prompt[begin + j + 1]];
  seq.stream->Push(std::move(event));
}

bool Engine::Impl::PrefillChunk() {
  const std::vector<Sequence*> group = PrefillGroup();
  if (group.empty()) return false;
  const auto rows = static_cast<int64_t>(group.size());
  const int64_t begin = group[0]->prefilled;
  const int64_t count = ChunkLength(*group[0]);
  const absl::Time started = clock_.Now();
  try {
    std::vector<int64_t> tokens, slots;
    for (Sequence* seq : group) {
      const auto& prompt = seq->request.prompt;
      // Rows share a position in the state, not in their prompts (a start
      // state comes first).
      tokens.insert(tokens.end(), prompt.begin() + seq->prefilled,
                    prompt.begin() + seq->prefilled + count);
      slots.push_back(seq->slot);
    }
    // Scoring needs every position's logits; generation only the prompt's
    // last, and nothing from its earlier chunks.
    const bool scoring = group[0]->scoring();
    const bool last_chunk = std::any_of(group.begin(), group.end(), [&](const Sequence* seq) {
      return seq->prefilled + count == static_cast<int64_t>(seq->request.prompt.size());
    });
    const PrefillLogits wanted = scoring      ? PrefillLogits::kAll
                                 : last_chunk ? PrefillLogits::kLast
                                              : PrefillLogits::kNone;
    absl::StatusOr<torch::Tensor> logits = backend_->Prefill(
        torch::tensor(tokens, torch::dtype(torch::kLong)).view({rows, count}).to(device_),
        torch::tensor(slots, torch::dtype(torch::kLong)).to(device_), wanted);
    if (!logits.ok()) {
      for (Sequence* seq : group) EndWithError(*seq, logits.status());
      return true;
    }
    if (scoring) PushScores(*group[0], (*logits)[0], begin, count);
    if (logits->defined()) {
      torch::Tensor last =
          logits->select(1, logits->size(1) - 1).to(torch::kCPU, torch::kFloat).contiguous();
      for (int64_t i = 0; i < rows; ++i) group[i]->last_logits = RowToVector(last[i]);
    }
  } catch (const c10::Error& error) {  // copying the logits out
    for (Sequence* seq : group) {
      EndWithError(*seq, absl::InternalError(
                             absl::StrCat("prefill failed: ", error.what_without_backtrace())));
    }
    return true;
  }
  observer_->OnStep(EngineObserver::Phase::kPrefill, clock_.Now() - started, rows, rows * count);
  for (Sequence* seq : group) {
    seq->prefilled += count;
    SaveCheckpoint(*seq);
    if (seq->prefilling()) continue;
    if (seq->scoring()) {
      End(*seq, StreamEvent{});
    } else {
      const auto& logits = seq->last_logits;
      Emit(*seq, seq->continuation->Sample(logits.data(), static_cast<int64_t>(logits.size())));
    }
  }
  return true;
}

std::vector<Sequence*> Engine::Impl::DecodeBatch() const {
  std::vector<Sequence*> ready;
  for (const auto& seq : active_) {
    if (seq->stream && !seq->prefilling() && seq->next_token >= 0 && !seq->stream->full()) {
      ready.push_back(seq.get());
    }
  }
  const auto cap = static_cast<size_t>(std::max<int64_t>(1, options_.max_decode_rows));
  if (ready.size() <= cap) return ready;
  // Least attained service first; among equals, the longest unserved.
  std::nth_element(
      ready.begin(), ready.begin() + cap, ready.end(), [](const Sequence* a, const Sequence* b) {
        return std::tie(a->generated, a->last_decoded) < std::tie(b->generated, b->last_decoded);
      });
  ready.resize(cap);
  return ready;
}

bool Engine::Impl::DecodeStep() {
  std::vector<Sequence*> batch = DecodeBatch();
  if (batch.empty()) return false;
  ++decode_steps_;
  for (Sequence* seq : batch) seq->last_decoded = decode_steps_;
  const auto rows = static_cast<int64_t>(batch.size());
  std::vector<int64_t> tokens(rows), slots(rows);
  for (int64_t i = 0; i < rows; ++i) {
    tokens[i] = batch[i]->next_token;
    slots[i] = batch[i]->slot;
  }
  const absl::Time started = clock_.Now();
  absl::StatusOr<torch::Tensor> stepped =
      backend_->Step(torch::tensor(tokens, torch::dtype(torch::kLong)).to(device_),
                     torch::tensor(slots, torch::dtype(torch::kLong)).to(device_));
  torch::Tensor logits;
  if (stepped.ok()) {
    try {
      logits = stepped->to(torch::kCPU, torch::kFloat).contiguous();
    } catch (const c10::Error& error) {
      stepped =
          absl::InternalError(absl::StrCat("decode step failed: ", error.what_without_backtrace()));
    }
  }
  if (!stepped.ok()) {
    for (Sequence* seq : batch) EndWithError(*seq, stepped.status());
    return true;
  }
  observer_->OnStep(EngineObserver::Phase::kDecode, clock_.Now() - started, rows, rows);
  const int64_t vocab = logits.size(1);
  const float* data = logits.data_ptr<float>();
  // Each row has its own sampler, so the rows sample on all intra-op
  // threads (a few microseconds each at a 4k vocabulary, which the other
  // threads would otherwise spend waiting); the events go out in row order.
  std::vector<SampledToken> sampled(rows);
  at::parallel_for(0, rows, kRowsPerSamplingTask, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (!batch[i]->finishing)
        sampled[i] = batch[i]->continuation->Sample(data + i * vocab, vocab);
    }
  });
  for (int64_t i = 0; i < rows; ++i) {
    if (batch[i]->finishing) {  // its last token is in the state now
      batch[i]->last_fed = true;
      End(*batch[i], std::exchange(batch[i]->pending, StreamEvent()));
    } else {
      Emit(*batch[i], sampled[i]);
    }
  }
  return true;
}

void Engine::Impl::Emit(Sequence& seq, const SampledToken& token) {
  const absl::Time now = clock_.Now();
  ++seq.generated;
  seq.generated_ids.push_back(token.id);
  if (seq.generated == 1) {
    observer_->OnFirstToken(seq.request.protocol, now - seq.arrival);
  } else {
    observer_->OnNextToken(seq.request.protocol, now - seq.last_token);
  }
  seq.last_token = now;
  StreamEvent& event = seq.pending;
  event.token_ids.push_back(token.id);
  if (seq.request.logprobs) event.logprobs.push_back(static_cast<float>(token.logprob));
  if (!token.top.empty()) event.top_logprobs.push_back(token.top);
  AcceptedToken accepted = seq.continuation->Accept(token.id);
  event.text += accepted.text;
  event.finish_reason = accepted.finish_reason;
  if (event.finish_reason == FinishReason::kUnspecified) {
    seq.next_token = token.id;
    // The first token goes out at once (time to first token); later ones
    // every stream_interval tokens.
    const auto due = static_cast<size_t>(std::max<int64_t>(1, options_.stream_interval));
    if (seq.generated == 1 || event.token_ids.size() >= due) {
      seq.stream->Push(std::exchange(seq.pending, StreamEvent()));
    }
    return;
  }
  if (seq.request.return_state && CanFeedLast(seq)) {
    // One more decode step puts the last token into the state that goes
    // back to the client; it samples nothing.
    seq.next_token = token.id;
    seq.finishing = true;
    return;
  }
  End(seq, std::exchange(seq.pending, StreamEvent()));
}

void Engine::Impl::End(Sequence& seq, StreamEvent last) {
  if (last.status.ok() && !seq.scoring() && seq.slot >= 0) {
    if (absl::Status saved = SaveFinished(seq, last); !saved.ok()) {
      // The tokens stand; only the state asked for could not be copied.
      seq.pending = std::exchange(last, StreamEvent());
      last.status = saved;
    }
  }
  // A failure does not take back tokens already generated: they go first.
  if (!last.status.ok() && !seq.pending.token_ids.empty()) {
    seq.stream->Push(std::exchange(seq.pending, StreamEvent()));
  }
  last.last = true;
  if (last.status.ok()) {
    last.prompt_tokens = static_cast<int64_t>(seq.request.prompt.size());
    last.completion_tokens = seq.generated;
    last.cached_tokens = seq.request.start_tokens + seq.cache_hit;
    last.prefilled_tokens = last.prompt_tokens - seq.cache_hit;
  }
  if (seq.slot >= 0) {
    pool_.Release(seq.slot).IgnoreError();  // the slot is ours: cannot fail
    seq.slot = -1;
    reserved_ -= seq.reservation;
  }
  observer_->OnFinished(seq.request.protocol, last, clock_.Now() - seq.arrival);
  seq.stream->Push(std::move(last));
  seq.stream.reset();  // marks the sequence ended
  --unfinished_;
}

void Engine::Impl::RemoveEnded() {
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [](const std::unique_ptr<Sequence>& seq) { return !seq->stream; }),
                active_.end());
  free_slots_ = pool_.capacity() - pool_.in_use();
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
      // busy engine paid for the idle ones (docs/benchmarks.md). The next
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
