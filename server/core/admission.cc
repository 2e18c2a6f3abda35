#include "server/core/admission.h"

#include <utility>

namespace attn::serving {

AdmissionPath::AdmissionPath(const ModelRegistry& registry, const Access& access,
                             DeliveryThread* delivery)
    : registry_(registry), access_(access), delivery_(delivery) {}

absl::StatusOr<HostedModel*> AdmissionPath::Resolve(const std::string& name) const {
  if (!accepting_) return absl::UnavailableError("the server is shutting down; retry elsewhere");
  return registry_.Find(name);
}

Admission AdmissionPath::Admit(const std::string& authorization, const std::string& model,
                               const Convert& convert, std::function<void()> on_events) const {
  Admission admission;
  // Before anything else: an unknown caller learns nothing and queues nothing.
  absl::StatusOr<Access::Ticket> ticket = access_.Admit(authorization);
  if (!ticket.ok()) {
    admission.status = ticket.status();
    return admission;
  }
  admission.ticket = *std::move(ticket);
  absl::StatusOr<HostedModel*> resolved = Resolve(model);
  if (!resolved.ok()) {
    admission.status = resolved.status();
    return admission;
  }
  admission.model = *resolved;
  absl::StatusOr<EngineRequest> request = convert(*admission.model);
  if (!request.ok()) {
    admission.status = request.status();
    return admission;
  }
  Engine& engine = *admission.model->engine;
  admission.stream = engine.NewStream(delivery_);
  admission.stream->SetListener(std::move(on_events));
  admission.status = engine.Submit(*std::move(request), admission.stream);
  if (!admission.status.ok()) {
    admission.stream->ClearListener();
    admission.stream.reset();
  }
  return admission;
}

}  // namespace attn::serving
