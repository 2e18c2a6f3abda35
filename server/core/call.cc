#include "server/core/call.h"

#include <utility>

#include "server/metrics/metrics.h"

namespace attn::serving {

CallCore::CallCore(const ModelRegistry& registry, const Access& access, Metrics* metrics)
    : registry_(registry), access_(access), metrics_(metrics) {}

absl::StatusOr<HostedModel*> CallCore::Resolve(const std::string& name) const {
  if (!accepting_) return absl::UnavailableError("the server is shutting down; retry elsewhere");
  return registry_.Find(name);
}

attn::v1::ModelInfo CallCore::Describe(const HostedModel& model) const {
  const ModelDescription& d = model.description;
  attn::v1::ModelInfo info;
  info.set_name(d.name);
  info.set_architecture(d.architecture);
  info.set_mixer(d.mixer);
  info.set_parameters(d.parameters);
  info.set_vocab_size(d.vocab_size);
  info.set_max_context(d.max_context);
  info.set_state_bytes_per_sequence(d.state_bytes_per_sequence);
  info.set_device(d.device);
  info.set_is_default(d.name == registry_.default_model());
  info.set_layers(d.layers);
  info.set_d_model(d.d_model);
  info.set_max_active_sequences(model.engine->options().max_active);
  info.set_backend(d.backend);
  info.set_state_fingerprint(d.fingerprint);
  info.set_state_cache_bytes(model.engine->options().state_cache_bytes);
  info.set_chat_format(d.chat_format);
  if (!d.chat_template.empty()) info.set_chat_template(d.chat_template);
  if (!d.tool_call_format.empty()) info.set_tool_call_format(d.tool_call_format);
  for (const auto& [name, state] : model.initial_states) info.add_initial_states(name);
  if (!d.weight_dtype.empty()) {
    info.set_weight_dtype(d.weight_dtype);
    info.set_weight_bytes(d.weight_bytes);
  }
  return info;
}

void CallCore::Count(const std::string& model, const char* method, absl::StatusCode code,
                     Protocol protocol) const {
  if (metrics_ != nullptr) metrics_->CountRequest(model, method, StatusCodeName(code), protocol);
}

Call::Call(const CallCore& core, const char* method, Protocol protocol)
    : core_(core), method_(method), protocol_(protocol) {}

Call::~Call() {
  absl::MutexLock lock(&mu_);
  for (const auto& stream : streams_) stream->Cancel();
  if (!outcome_) CountLocked(absl::StatusCode::kCancelled);
}

absl::Status Call::Start(const std::string& authorization, const std::string& model,
                         const Convert& convert, std::function<void()> wake, WakeOn wake_on) {
  // Before anything else: an unknown caller learns nothing and queues nothing.
  absl::StatusOr<Access::Ticket> first = core_.access_.Admit(authorization);
  if (!first.ok()) return Refuse(first.status());
  absl::StatusOr<HostedModel*> resolved = core_.Resolve(model);
  if (!resolved.ok()) return Refuse(resolved.status());
  {
    // A name the caller made up is not a label: it could add series without
    // end. Until a model is resolved the label is empty.
    absl::MutexLock lock(&mu_);
    model_ = *resolved;
  }
  absl::StatusOr<std::vector<EngineRequest>> requests = convert(**resolved);
  if (!requests.ok()) return Refuse(requests.status());
  Engine& engine = *(*resolved)->engine;
  DeliveryThread* delivery = wake_on == WakeOn::kDeliveryThread ? &core_.delivery_ : nullptr;
  for (size_t i = 0; i < requests->size(); ++i) {
    absl::StatusOr<Access::Ticket> ticket =
        i == 0 ? std::move(first) : core_.access_.Admit(authorization);
    if (!ticket.ok()) return Refuse(ticket.status());
    std::shared_ptr<RequestStream> stream = engine.NewStream(delivery);
    stream->SetListener(wake);
    EngineRequest& request = (*requests)[i];
    request.protocol = protocol_;
    absl::Status submitted = engine.Submit(std::move(request), stream);
    if (!submitted.ok()) {
      stream->ClearListener();
      return Refuse(submitted);
    }
    absl::MutexLock lock(&mu_);
    streams_.push_back(std::move(stream));
    done_.push_back(false);
    tickets_.push_back(*std::move(ticket));
    // Cancelled meanwhile (the caller went away): stop what it submitted.
    if (outcome_) streams_.back()->Cancel();
  }
  {
    absl::MutexLock lock(&mu_);
    started_ = true;
  }
  // Events may have come before their streams were stored here.
  wake();
  return absl::OkStatus();
}

const HostedModel* Call::model() const {
  absl::MutexLock lock(&mu_);
  return model_;
}

int64_t Call::choices() const {
  absl::MutexLock lock(&mu_);
  return started_ ? static_cast<int64_t>(streams_.size()) : 0;
}

absl::Status Call::Pop(std::vector<ChoiceEvent>* events) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (done_[i]) continue;
    std::vector<StreamEvent> ready = streams_[i]->PopReady();
    if (ready.empty()) continue;
    // PopReady returns a failure alone.
    if (!ready.front().status.ok()) return ready.front().status;
    StreamEvent merged = MergeEvents(std::move(ready));
    done_[i] = merged.last;
    events->push_back({static_cast<int64_t>(i), std::move(merged)});
  }
  return absl::OkStatus();
}

bool Call::AllDone() const {
  absl::MutexLock lock(&mu_);
  if (!started_) return false;
  for (bool done : done_) {
    if (!done) return false;
  }
  return true;
}

bool Call::Finish(const absl::Status& outcome) {
  absl::MutexLock lock(&mu_);
  if (outcome_) return false;
  outcome_ = outcome;
  // Before the answer goes out, so that a client that sends its next
  // request as soon as it has the answer finds its key's limit free, and
  // one that reads the metrics then finds the call counted.
  tickets_.clear();
  CountLocked(outcome.code());
  if (!outcome.ok()) {
    // The engine frees their slots at its next iteration.
    for (const auto& stream : streams_) stream->Cancel();
  }
  return true;
}

void Call::Cancel() {
  Finish(absl::CancelledError("cancelled"));
  // Also when the call had finished: its last bytes may be unsent.
  absl::MutexLock lock(&mu_);
  for (const auto& stream : streams_) stream->Cancel();
}

std::optional<absl::Status> Call::outcome() const {
  absl::MutexLock lock(&mu_);
  return outcome_;
}

void Call::Detach() {
  std::vector<std::shared_ptr<RequestStream>> streams;
  {
    absl::MutexLock lock(&mu_);
    streams = streams_;
  }
  // Not under mu_: a running wake may be waiting for it.
  for (const auto& stream : streams) stream->ClearListener();
}

void Call::Release() {
  absl::MutexLock lock(&mu_);
  streams_.clear();
  done_.clear();
}

absl::Status Call::Refuse(const absl::Status& refusal) {
  Finish(refusal);
  return refusal;
}

void Call::CountLocked(absl::StatusCode code) {
  core_.Count(model_ != nullptr ? model_->description.name : std::string(), method_, code,
              protocol_);
}

StreamEvent MergeEvents(std::vector<StreamEvent> events) {
  StreamEvent merged = std::move(events.back());
  if (events.size() == 1) return merged;
  StreamEvent head;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    StreamEvent& e = events[i];
    head.text += e.text;
    head.token_ids.insert(head.token_ids.end(), e.token_ids.begin(), e.token_ids.end());
    head.logprobs.insert(head.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
    head.top_logprobs.insert(head.top_logprobs.end(), e.top_logprobs.begin(), e.top_logprobs.end());
  }
  merged.text = head.text + merged.text;
  merged.token_ids.insert(merged.token_ids.begin(), head.token_ids.begin(), head.token_ids.end());
  merged.logprobs.insert(merged.logprobs.begin(), head.logprobs.begin(), head.logprobs.end());
  merged.top_logprobs.insert(merged.top_logprobs.begin(), head.top_logprobs.begin(),
                             head.top_logprobs.end());
  return merged;
}

}  // namespace attn::serving
