#include "server/grpc/service.h"

#include <chrono>
#include <functional>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "model/text/tokenizer.h"
#include "server/metrics/metrics.h"
#include "server/state/state_blob.h"
#include "util/field_error.h"
#include "util/utf8.h"

namespace attn::serving {
namespace {

using attn::v1::GenerateRequest;
using attn::v1::GenerateResponse;

absl::Time DeadlineOf(const grpc::CallbackServerContext* context) {
  const auto deadline = context->deadline();
  // No deadline arrives as the largest time point.
  if (deadline > std::chrono::system_clock::now() + std::chrono::hours(24 * 365 * 100)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

attn::v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return attn::v1::FINISH_REASON_LENGTH;
    case FinishReason::kStop:
      return attn::v1::FINISH_REASON_STOP;
    case FinishReason::kEos:
      return attn::v1::FINISH_REASON_EOS;
    case FinishReason::kUnspecified:
      break;
  }
  return attn::v1::FINISH_REASON_UNSPECIFIED;
}

// Adds an event to a response: the events queued since the last write for a
// streamed message, all of them for a unary one.
// `fingerprint`: the model's, for a state the event carries.
void AppendEvent(const StreamEvent& event, bool logprobs, const std::string& fingerprint,
                 GenerateResponse* response) {
  response->mutable_text()->append(event.text);
  for (int64_t id : event.token_ids) response->add_token_ids(id);
  if (logprobs) {
    for (float logprob : event.logprobs) response->add_logprobs(logprob);
  }
  for (const auto& alternatives : event.top_logprobs) {
    attn::v1::TopLogprobs* top = response->add_top_logprobs();
    for (const auto& [id, logprob] : alternatives) {
      top->add_token_ids(id);
      top->add_logprobs(logprob);
    }
  }
  if (event.last) {
    response->set_finish_reason(ToProto(event.finish_reason));
    response->mutable_usage()->set_prompt_tokens(event.prompt_tokens);
    response->mutable_usage()->set_completion_tokens(event.completion_tokens);
    response->mutable_usage()->set_cached_tokens(event.cached_tokens);
    response->mutable_usage()->set_prefilled_tokens(event.prefilled_tokens);
    if (event.state) {
      response->set_state(EncodeStateBlob({fingerprint, event.state_tokens, event.state}));
      response->set_state_tokens(event.state_tokens);
      for (int64_t id : event.state_token_ids) response->add_state_token_ids(id);
    }
  }
}

// A GenerateRequest for `model`: its fields checked and completed, and the
// state it continues (GenerateRequest.state) applied.
absl::StatusOr<EngineRequest> ToGeneration(const GenerateRequest& request, const HostedModel& model,
                                           absl::Time deadline) {
  const RequestLimits& limits = model.engine->options().limits;
  absl::StatusOr<EngineRequest> generation =
      ToEngineRequest(request, *model.tokenizer, limits, deadline);
  if (!generation.ok()) return generation;
  generation->return_state = request.return_state();
  if (request.has_state()) {
    const StateTarget target{model.description.name, model.description.fingerprint,
                             model.engine->state_budget_bytes()};
    absl::Status applied = ApplyStartState(request.state(), target, limits, &*generation);
    if (!applied.ok()) return applied;
  }
  if (request.has_initial_state()) {
    absl::Status applied = ApplyInitialState(request.initial_state(), model.description.name,
                                             model.initial_states, &*generation);
    if (!applied.ok()) return applied;
  }
  return generation;
}

// What the reactors of a call that runs on an engine share: the admission
// (its stream and ticket), exactly one Finish whatever comes first (the
// last event, a failure, a cancellation), and the call's count in metrics
// once gRPC is done with it. `Base` is gRPC's unary or write reactor; a
// subclass says what events become (TakeEventsLocked).
template <typename Base>
class EngineCallReactor : public Base {
 public:
  EngineCallReactor(Metrics* metrics, const char* method) : metrics_(metrics), method_(method) {}

  // Admits the call through `path` with this reactor listening to its
  // stream, or finishes it with the reason it was refused.
  void Start(const AdmissionPath& path, const std::string& authorization, const std::string& model,
             const AdmissionPath::Convert& convert) {
    Admission admission = path.Admit(authorization, model, convert, [this] { Pump(); });
    absl::MutexLock lock(&mu_);
    // A name the caller made up is not a label: it could add series without
    // end. Until a model is resolved the label is empty.
    hosted_ = admission.model;
    if (!admission.status.ok()) {
      FinishLocked(ToGrpcStatus(admission.status));
      return;
    }
    ticket_ = std::move(admission.ticket);
    stream_ = std::move(admission.stream);
    // Events may have arrived before the stream was stored here.
    PumpLocked();
  }

  void OnCancel() override {
    std::shared_ptr<RequestStream> stream;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      stream = stream_;
      if (!writing_) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
    }
    // The engine frees the slot at its next iteration.
    if (stream) stream->Cancel();
  }
  void OnDone() override {
    std::string model, code;
    std::shared_ptr<RequestStream> stream;
    {
      absl::MutexLock lock(&mu_);
      if (hosted_ != nullptr) model = hosted_->description.name;
      code = code_;
      stream = stream_;
    }
    // Waits for a listener call in flight (it takes mu_, so not under it);
    // none starts after it.
    if (stream) stream->ClearListener();
    if (metrics_ != nullptr) metrics_->CountRequest(model, method_, code);
    delete this;
  }

 protected:
  // Takes a batch of successful events (the last one may end the request);
  // returns whether it started a write (the next batch waits for
  // WriteDone). Runs under mu_.
  virtual bool TakeEventsLocked(const std::vector<StreamEvent>& events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;

  // A write started by TakeEventsLocked completed.
  void WriteDone(bool ok) {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      stream_->Cancel();
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the client stopped reading"));
      return;
    }
    PumpLocked();
  }

  // The call's outcome is known: records it and finishes, once.
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    code_ = StatusCodeName(static_cast<absl::StatusCode>(status.error_code()));
    this->Finish(status);
  }
  // The last message goes out with the call's status in one operation
  // (StartWriteAndFinish): records the call as finished without Finish.
  void MarkFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    finished_ = true;
    code_ = "OK";
  }

  absl::Mutex mu_;
  const HostedModel* hosted_ ABSL_GUARDED_BY(mu_) = nullptr;  // set by Start once resolved
  bool writing_ ABSL_GUARDED_BY(mu_) = false;

 private:
  void Pump() {
    absl::MutexLock lock(&mu_);
    PumpLocked();
  }
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (!writing_ && !finished_ && stream_ != nullptr) {
      if (cancelled_) {  // OnCancel may have come before Start stored the stream
        stream_->Cancel();
        FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
        return;
      }
      std::vector<StreamEvent> events = stream_->PopReady();
      if (events.empty()) return;
      if (!events.front().status.ok()) {  // PopReady returns a failure alone
        FinishLocked(ToGrpcStatus(events.front().status));
        return;
      }
      writing_ = TakeEventsLocked(events);
    }
  }

  Metrics* const metrics_;
  const char* const method_;
  Access::Ticket ticket_ ABSL_GUARDED_BY(mu_);                  // held until the call is done
  std::shared_ptr<RequestStream> stream_ ABSL_GUARDED_BY(mu_);  // set by Start once admitted
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // The call's status code for metrics, read by OnDone.
  std::string code_ ABSL_GUARDED_BY(mu_) = "UNKNOWN";
};

// Writes a request's events as stream messages, one write at a time; a
// write completing pulls what queued meanwhile, so the RequestStream's bound
// is the only buffer. A reader that keeps up gets one message per token; one
// that falls behind (or a server short of CPU) gets the queued tokens merged
// into one message, which costs far less than a message each.
class StreamReactor : public EngineCallReactor<grpc::ServerWriteReactor<GenerateResponse>> {
 public:
  StreamReactor(Metrics* metrics, bool logprobs)
      : EngineCallReactor(metrics, "GenerateStream"), logprobs_(logprobs) {}

  void OnWriteDone(bool ok) override { WriteDone(ok); }

 private:
  bool TakeEventsLocked(const std::vector<StreamEvent>& events) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const ModelDescription& model = hosted_->description;
    response_.Clear();
    response_.set_model(model.name);
    for (const StreamEvent& event : events) {
      AppendEvent(event, logprobs_, model.fingerprint, &response_);
    }
    if (events.back().last) {
      MarkFinishedLocked();
      StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
    } else {
      StartWrite(&response_);
    }
    return true;
  }
  const bool logprobs_;
  // The message being written: it must live until OnWriteDone.
  GenerateResponse response_ ABSL_GUARDED_BY(mu_);
};

// Gathers all of a request's events into one unary response: `on_event`
// adds each to it, `on_success` runs after the last.
class CollectReactor : public EngineCallReactor<grpc::ServerUnaryReactor> {
 public:
  using OnEvent = std::function<void(const ModelDescription& model, const StreamEvent& event)>;
  CollectReactor(Metrics* metrics, const char* method, OnEvent on_event,
                 std::function<void()> on_success)
      : EngineCallReactor(metrics, method),
        on_event_(std::move(on_event)),
        on_success_(std::move(on_success)) {}

 private:
  bool TakeEventsLocked(const std::vector<StreamEvent>& events) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const StreamEvent& event : events) {
      on_event_(hosted_->description, event);
      if (event.last) {
        on_success_();
        FinishLocked(grpc::Status::OK);
      }
    }
    return false;
  }

  OnEvent on_event_;
  std::function<void()> on_success_;
};

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

TextGenerationService::TextGenerationService(const ModelRegistry& registry, Metrics* metrics,
                                             const Access* access)
    : registry_(registry),
      metrics_(metrics),
      access_(access ? access : &open_access_),
      admission_(registry, *access_, &delivery_) {}

std::string TextGenerationService::Authorization(const grpc::CallbackServerContext* context) {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  return it == metadata.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

grpc::ServerUnaryReactor* TextGenerationService::Done(grpc::CallbackServerContext* context,
                                                      const std::string& model,
                                                      const std::string& method,
                                                      const absl::Status& status) {
  if (metrics_ != nullptr) metrics_->CountRequest(model, method, StatusCodeName(status.code()));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* TextGenerationService::Generate(grpc::CallbackServerContext* context,
                                                          const GenerateRequest* request,
                                                          GenerateResponse* response) {
  auto* reactor = new CollectReactor(
      metrics_, "Generate",
      [response, logprobs = request->logprobs()](const ModelDescription& model,
                                                 const StreamEvent& event) {
        response->set_model(model.name);
        AppendEvent(event, logprobs, model.fingerprint, response);
      },
      [] {});
  reactor->Start(admission_, Authorization(context), request->model(),
                 [request, deadline = DeadlineOf(context)](const HostedModel& model) {
                   return ToGeneration(*request, model, deadline);
                 });
  return reactor;
}

grpc::ServerWriteReactor<GenerateResponse>* TextGenerationService::GenerateStream(
    grpc::CallbackServerContext* context, const GenerateRequest* request) {
  auto* reactor = new StreamReactor(metrics_, request->logprobs());
  reactor->Start(admission_, Authorization(context), request->model(),
                 [request, deadline = DeadlineOf(context)](const HostedModel& model) {
                   return ToGeneration(*request, model, deadline);
                 });
  return reactor;
}

grpc::ServerUnaryReactor* TextGenerationService::Score(grpc::CallbackServerContext* context,
                                                       const attn::v1::ScoreRequest* request,
                                                       attn::v1::ScoreResponse* response) {
  auto* reactor = new CollectReactor(
      metrics_, "Score",
      [response](const ModelDescription& model, const StreamEvent& event) {
        response->set_model(model.name);
        for (int64_t id : event.token_ids) response->add_token_ids(id);
        for (float logprob : event.logprobs) response->add_logprobs(logprob);
      },
      [response] {
        double total = 0.0;
        for (int i = 1; i < response->logprobs_size(); ++i) total += response->logprobs(i);
        response->set_total_logprob(total);
        response->set_perplexity(std::exp(-total / (response->logprobs_size() - 1)));
      });
  reactor->Start(admission_, Authorization(context), request->model(),
                 [request, deadline = DeadlineOf(context)](const HostedModel& model) {
                   return ToScoreRequest(*request, *model.tokenizer, model.engine->options().limits,
                                         deadline);
                 });
  return reactor;
}

grpc::ServerUnaryReactor* TextGenerationService::Tokenize(grpc::CallbackServerContext* context,
                                                          const attn::v1::TokenizeRequest* request,
                                                          attn::v1::TokenizeResponse* response) {
  if (absl::Status known = access_->Authenticate(Authorization(context)); !known.ok()) {
    return Done(context, "", "Tokenize", known);
  }
  auto model = admission_.Resolve(request->model());
  if (!model.ok()) return Done(context, "", "Tokenize", model.status());
  const std::string& name = (*model)->description.name;
  if (!IsValidUtf8(request->text())) {
    return Done(context, name, "Tokenize", InvalidField("text", "is not valid UTF-8"));
  }
  response->set_model(name);
  for (int64_t id : (*model)->tokenizer->Encode(request->text())) response->add_token_ids(id);
  return Done(context, name, "Tokenize", absl::OkStatus());
}

grpc::ServerUnaryReactor* TextGenerationService::Detokenize(
    grpc::CallbackServerContext* context, const attn::v1::DetokenizeRequest* request,
    attn::v1::DetokenizeResponse* response) {
  if (absl::Status known = access_->Authenticate(Authorization(context)); !known.ok()) {
    return Done(context, "", "Detokenize", known);
  }
  auto model = admission_.Resolve(request->model());
  if (!model.ok()) return Done(context, "", "Detokenize", model.status());
  const std::string& name = (*model)->description.name;
  std::vector<int64_t> ids(request->token_ids().begin(), request->token_ids().end());
  absl::Status valid = CheckTokenIds(*(*model)->tokenizer, ids, "token_ids");
  if (!valid.ok()) return Done(context, name, "Detokenize", valid);
  response->set_model(name);
  response->set_text((*model)->tokenizer->Decode(ids));
  return Done(context, name, "Detokenize", absl::OkStatus());
}

grpc::ServerUnaryReactor* TextGenerationService::ListModels(
    grpc::CallbackServerContext* context, const attn::v1::ListModelsRequest* /*request*/,
    attn::v1::ListModelsResponse* response) {
  if (absl::Status known = access_->Authenticate(Authorization(context)); !known.ok()) {
    return Done(context, "", "ListModels", known);
  }
  for (const auto& model : registry_.models()) {
    const ModelDescription& d = model->description;
    attn::v1::ModelInfo* info = response->add_models();
    info->set_name(d.name);
    info->set_architecture(d.architecture);
    info->set_mixer(d.mixer);
    info->set_parameters(d.parameters);
    info->set_vocab_size(d.vocab_size);
    info->set_max_context(d.max_context);
    info->set_state_bytes_per_sequence(d.state_bytes_per_sequence);
    info->set_device(d.device);
    info->set_is_default(d.name == registry_.default_model());
    info->set_layers(d.layers);
    info->set_d_model(d.d_model);
    info->set_max_active_sequences(model->engine->options().max_active);
    info->set_backend(d.backend);
    info->set_state_fingerprint(d.fingerprint);
    info->set_state_cache_bytes(model->engine->options().state_cache_bytes);
    info->set_chat_format(d.chat_format);
    for (const auto& [name, state] : model->initial_states) info->add_initial_states(name);
    if (!d.weight_dtype.empty()) {
      info->set_weight_dtype(d.weight_dtype);
      info->set_weight_bytes(d.weight_bytes);
    }
  }
  return Done(context, "", "ListModels", absl::OkStatus());
}

}  // namespace attn::serving
