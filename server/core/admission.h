// The one path a request takes into a model's engine, whatever protocol
// brought it: the caller's admission (API key, per-key limit), the model it
// names, the conversion of the protocol's request into an EngineRequest
// (server/core/validation.h), a stream for its events, and the submission. The
// gRPC service calls it for Generate, GenerateStream and Score; every other
// protocol's front end calls it the same way, so validation, queueing,
// batching, the state cache and metrics are the same for all of them.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/core/access.h"
#include "server/core/model_registry.h"
#include "server/engine/engine.h"

namespace attn::serving {

class DeliveryThread;

// What Admit made of a request.
struct Admission {
  // OK: the request is queued on `model`'s engine and its events arrive on
  // `stream`. Otherwise why it was refused, the status to answer with.
  absl::Status status;
  // The model it runs on; also set when it was refused after the model was
  // found (for the metrics' model label), null when refused before.
  HostedModel* model = nullptr;
  std::shared_ptr<RequestStream> stream;
  // The caller's admission, held until the call is done.
  Access::Ticket ticket;
};

class AdmissionPath {
 public:
  // `registry`, `access` and `delivery` must outlive the path; `delivery`
  // writes every admitted request's events (it runs each stream's listener).
  AdmissionPath(const ModelRegistry& registry, const Access& access, DeliveryThread* delivery);

  // New requests get UNAVAILABLE from now on (shutdown has begun).
  void StopAccepting() { accepting_ = false; }
  bool accepting() const { return accepting_; }

  // The model `name` names (empty: the default): kUnavailable once
  // stopping, kNotFound naming it and the hosted models.
  absl::StatusOr<HostedModel*> Resolve(const std::string& name) const;

  // Converts a protocol's request for the model it resolved to.
  using Convert = std::function<absl::StatusOr<EngineRequest>(const HostedModel&)>;

  // Admits the caller (`authorization`: the bearer credential it sent,
  // empty for none), resolves `model`, converts the request, and submits it
  // with a stream whose listener is `on_events` (set before the engine can
  // push anything; it runs on the delivery thread and may run before Admit
  // returns). Each step's failure is the returned status: kUnauthenticated
  // and kResourceExhausted (the key's limit) before anything else is looked
  // at, then Resolve's, Convert's, and the engine's (a full queue:
  // kResourceExhausted; draining: kUnavailable).
  Admission Admit(const std::string& authorization, const std::string& model,
                  const Convert& convert, std::function<void()> on_events) const;

 private:
  const ModelRegistry& registry_;
  const Access& access_;
  DeliveryThread* const delivery_;
  std::atomic<bool> accepting_{true};
};

}  // namespace attn::serving
