// The one lifecycle of a call on the engines, whatever protocol brought it.
//
// The server owns one CallCore: the hosted models, the callers' access, the
// metrics and the thread that runs streams' listeners. A protocol's front
// end parses its request, starts a Call with a conversion of that request
// into engine requests (one per choice), pops the events when woken and
// writes them in its own format. Everything else happens here, the same for
// every protocol: the caller's admission (API key, per-key limit) before
// anything is looked at, the model resolved, each choice submitted with its
// own ticket, the events of a choice merged into one per pop, exactly one
// outcome whatever comes first (the last event, a failure, a cancellation),
// the tickets released before the last bytes go out, and the call counted
// in metrics once.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "attn/v1/text_generation.pb.h"
#include "server/core/access.h"
#include "server/core/model_registry.h"
#include "server/engine/delivery_thread.h"
#include "server/engine/engine.h"

namespace attn::serving {

class Metrics;

class CallCore {
 public:
  // `registry` and `access` must outlive the core; `metrics` may be null.
  // The engines' streams point to the core's delivery thread, so they must
  // stop before it goes (InferenceServer::Shutdown stops them first).
  CallCore(const ModelRegistry& registry, const Access& access, Metrics* metrics);

  // New calls get UNAVAILABLE from now on (shutdown has begun).
  void StopAccepting() { accepting_ = false; }
  bool accepting() const { return accepting_; }

  const ModelRegistry& registry() const { return registry_; }
  const Access& access() const { return access_; }

  // The model `name` names (empty: the default): kUnavailable once
  // stopping, kNotFound naming it and the hosted models.
  absl::StatusOr<HostedModel*> Resolve(const std::string& name) const;

  // The model as ListModels and /v1/models describe it: the one list of its
  // facts, which the HTTP API turns into JSON field by field.
  attn::v1::ModelInfo Describe(const HostedModel& model) const;

  // Counts a call that ran on no engine (ListModels, Tokenize, a request
  // refused before it named a model: `model` empty).
  void Count(const std::string& model, const char* method, absl::StatusCode code,
             Protocol protocol) const;

 private:
  friend class Call;
  const ModelRegistry& registry_;
  const Access& access_;
  Metrics* const metrics_;
  std::atomic<bool> accepting_{true};
  // Writes every admitted call's events for the front ends whose listeners
  // do work (a gRPC write), so that an engine never does.
  mutable DeliveryThread delivery_;
};

// One choice's events since the last pop, merged into one: its text and
// tokens in order, and the last event's finish reason, usage and state.
struct ChoiceEvent {
  int64_t choice = 0;
  StreamEvent event;
};

class Call {
 public:
  // `method` is the call's label in metrics ("Generate", "ChatCompletions").
  Call(const CallCore& core, const char* method, Protocol protocol);
  // Stops the choices still running; a call that never finished counts as
  // cancelled. Detach() first when a wake may still run.
  ~Call();
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  // Converts a protocol's request for the model it names into its choices.
  // Runs inside Start, before any choice is submitted.
  using Convert = std::function<absl::StatusOr<std::vector<EngineRequest>>(const HostedModel&)>;

  // Where `wake` runs: on the core's delivery thread (it writes), or on the
  // engine's thread that pushed the event (it only relays a wake-up, which
  // costs less than a hand-over).
  enum class WakeOn { kDeliveryThread, kEngineThread };

  // Admits the caller (`authorization`: the bearer credential it sent,
  // empty for none), resolves `model`, converts the request and submits
  // each choice with its own ticket. `wake` runs whenever a choice has
  // events, possibly before Start returns, and once more when Start has
  // admitted every choice. A refusal is returned and is the call's outcome:
  // kUnauthenticated and kResourceExhausted (the key's limit) before
  // anything else is looked at, then Resolve's, `convert`'s, and the
  // engine's (a full queue: kResourceExhausted; draining: kUnavailable);
  // choices already submitted are stopped.
  absl::Status Start(const std::string& authorization, const std::string& model,
                     const Convert& convert, std::function<void()> wake,
                     WakeOn wake_on = WakeOn::kDeliveryThread);

  // The model the call runs on; null until Start resolved it.
  const HostedModel* model() const;
  // How many choices Start admitted; 0 before it has admitted them all.
  int64_t choices() const;

  // Appends what is ready, one ChoiceEvent per choice with events. A choice
  // that failed: returns its failure instead, after the events ready before
  // it (a writer sends them, then the error).
  absl::Status Pop(std::vector<ChoiceEvent>* events);
  // Whether every choice has sent its last event.
  bool AllDone() const;

  // Records the call's outcome, the first time only (returns whether this
  // was it): a failure stops the other choices; the tickets go back; the
  // call is counted with the outcome's code.
  bool Finish(const absl::Status& outcome);
  // The caller went away: stops every choice and finishes as cancelled.
  void Cancel();
  // The outcome once Finish ran.
  std::optional<absl::Status> outcome() const;

  // Returns once no wake runs and none will start. Never from a wake.
  void Detach();
  // Lets the choices' streams go: for an owner that its own wakes hold,
  // which would otherwise hold itself for ever.
  void Release();

 private:
  // Start's refusals: the call's outcome, and its answer.
  absl::Status Refuse(const absl::Status& refusal);
  void CountLocked(absl::StatusCode code) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CallCore& core_;
  const char* const method_;
  const Protocol protocol_;
  mutable absl::Mutex mu_;
  const HostedModel* model_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<std::shared_ptr<RequestStream>> streams_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> done_ ABSL_GUARDED_BY(mu_);
  std::vector<Access::Ticket> tickets_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;  // every choice admitted
  std::optional<absl::Status> outcome_ ABSL_GUARDED_BY(mu_);
};

// The events of one choice as one (`events` non-empty, in order).
StreamEvent MergeEvents(std::vector<StreamEvent> events);

}  // namespace attn::serving
