#include "server/service.h"

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "model/text/tokenizer.h"
#include "server/metrics.h"
#include "server/state_blob.h"
#include "util/field_error.h"
#include "util/utf8.h"

namespace attn::serving {
namespace {

using attn::v1::GenerateRequest;
using attn::v1::GenerateResponse;

// The queue between a model's engine and one request, as deep as the engine
// was configured to allow, delivered by `delivery`.
std::shared_ptr<RequestStream> NewStream(const HostedModel& model, DeliveryThread* delivery) {
  return std::make_shared<RequestStream>(static_cast<size_t>(model.engine->options().stream_buffer),
                                         delivery);
}

absl::Time DeadlineOf(const grpc::CallbackServerContext* context) {
  const auto deadline = context->deadline();
  // No deadline arrives as the largest time point.
  if (deadline > std::chrono::system_clock::now() + std::chrono::hours(24 * 365 * 100)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

std::string CodeName(const grpc::Status& status) {
  return StatusCodeName(static_cast<absl::StatusCode>(status.error_code()));
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

// ToEngineRequest, plus the state the request starts from
// (GenerateRequest.state) and whether it wants its own back.
absl::StatusOr<EngineRequest> ToGeneration(const GenerateRequest& request, const HostedModel& model,
                                           absl::Time deadline) {
  absl::StatusOr<EngineRequest> generation =
      ToEngineRequest(request, *model.tokenizer, model.engine->options().limits, deadline);
  if (!generation.ok()) return generation;
  generation->return_state = request.return_state();
  if (!request.has_state()) return generation;
  const int64_t budget = model.engine->state_budget_bytes();
  if (static_cast<int64_t>(request.state().size()) > budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "state: ", request.state().size(), " bytes, more than the ", budget,
        " bytes of state the server holds for the model's requests (--max_state_bytes)"));
  }
  absl::StatusOr<StateBlob> blob = DecodeStateBlob(request.state());
  if (!blob.ok()) return blob.status();
  const ModelDescription& d = model.description;
  if (blob->fingerprint != d.fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state: it holds a state of model ", blob->fingerprint, ", but ", d.name, " is ",
        d.fingerprint, "; send it to a server hosting that model, or start without it"));
  }
  generation->start_tokens = blob->tokens;
  generation->start_state = std::move(blob->row);
  return generation;
}

// Writes a request's events as stream messages, one write at a time; a
// write completing pulls what queued meanwhile, so the RequestStream's bound
// is the only buffer. A reader that keeps up gets one message per token; one
// that falls behind (or a server short of CPU) gets the queued tokens merged
// into one message, which costs far less than a message each.
class StreamReactor : public grpc::ServerWriteReactor<GenerateResponse> {
 public:
  StreamReactor(Metrics* metrics, std::string model, std::string fingerprint,
                std::shared_ptr<RequestStream> stream, bool logprobs, Access::Ticket ticket)
      : ticket_(std::move(ticket)),
        metrics_(metrics),
        model_(std::move(model)),
        fingerprint_(std::move(fingerprint)),
        stream_(std::move(stream)),
        logprobs_(logprobs) {}

  void Begin() {
    stream_->SetListener([this] { Pump(); });
  }
  void Fail(const absl::Status& status) {
    absl::MutexLock lock(&mu_);
    FinishLocked(ToGrpcStatus(status));
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      stream_->Cancel();
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the client stopped reading"));
      return;
    }
    PumpLocked();
  }
  void OnCancel() override {
    stream_->Cancel();  // the engine frees the slot at its next iteration
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (!writing_) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }
  void OnDone() override {
    stream_->ClearListener();
    if (metrics_ != nullptr) metrics_->CountRequest(model_, "GenerateStream", Code());
    delete this;
  }

 private:
  void Pump() {
    absl::MutexLock lock(&mu_);
    PumpLocked();
  }
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return;
    if (cancelled_) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
      return;
    }
    std::vector<StreamEvent> events = stream_->PopReady();
    if (events.empty()) return;
    if (!events.front().status.ok()) {  // PopReady returns a failure alone
      FinishLocked(ToGrpcStatus(events.front().status));
      return;
    }
    response_.Clear();
    response_.set_model(model_);
    for (const StreamEvent& event : events) AppendEvent(event, logprobs_, fingerprint_, &response_);
    writing_ = true;
    if (events.back().last) {
      finished_ = true;
      code_ = "OK";
      StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
    } else {
      StartWrite(&response_);
    }
  }
  std::string Code() {
    absl::MutexLock lock(&mu_);
    return code_;
  }
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    code_ = CodeName(status);
    Finish(status);
  }

  Access::Ticket ticket_;  // the caller's admission, held until the call is done
  Metrics* const metrics_;
  const std::string model_;
  const std::string fingerprint_;  // the model's, for states (server/state_blob.h)
  const std::shared_ptr<RequestStream> stream_;
  const bool logprobs_;
  absl::Mutex mu_;
  // The message being written: it must live until OnWriteDone.
  GenerateResponse response_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // The call's status code for metrics; read by OnDone, after the last
  // reaction that could write it.
  std::string code_ ABSL_GUARDED_BY(mu_) = "UNKNOWN";
};

// Gathers all of a request's events into one unary response.
class CollectReactor : public grpc::ServerUnaryReactor {
 public:
  CollectReactor(Metrics* metrics, std::string model, std::string method,
                 std::shared_ptr<RequestStream> stream,
                 std::function<void(const StreamEvent&)> on_event, std::function<void()> on_success,
                 Access::Ticket ticket)
      : ticket_(std::move(ticket)),
        metrics_(metrics),
        model_(std::move(model)),
        method_(std::move(method)),
        stream_(std::move(stream)),
        on_event_(std::move(on_event)),
        on_success_(std::move(on_success)) {}

  void Begin() {
    stream_->SetListener([this] { Collect(); });
  }
  void Fail(const absl::Status& status) {
    absl::MutexLock lock(&mu_);
    FinishLocked(ToGrpcStatus(status));
  }
  // The engine ends the request at its next iteration and pushes the last
  // event, which finishes the call.
  void OnCancel() override { stream_->Cancel(); }
  void OnDone() override {
    stream_->ClearListener();
    if (metrics_ != nullptr) metrics_->CountRequest(model_, method_, Code());
    delete this;
  }

 private:
  void Collect() {
    absl::MutexLock lock(&mu_);
    for (auto events = stream_->PopReady(); !events.empty(); events = stream_->PopReady()) {
      for (const StreamEvent& event : events) {
        if (finished_) continue;
        if (!event.status.ok()) {
          FinishLocked(ToGrpcStatus(event.status));
          continue;
        }
        on_event_(event);
        if (event.last) {
          on_success_();
          FinishLocked(grpc::Status::OK);
        }
      }
    }
  }
  std::string Code() {
    absl::MutexLock lock(&mu_);
    return code_;
  }
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    code_ = CodeName(status);
    Finish(status);
  }

  Access::Ticket ticket_;  // the caller's admission, held until the call is done
  Metrics* const metrics_;
  const std::string model_;
  const std::string method_;
  const std::shared_ptr<RequestStream> stream_;
  std::function<void(const StreamEvent&)> on_event_;
  std::function<void()> on_success_;
  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::string code_ ABSL_GUARDED_BY(mu_) = "UNKNOWN";
};

// A stream rejected before it started.
class RejectedStream : public grpc::ServerWriteReactor<GenerateResponse> {
 public:
  explicit RejectedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

TextGenerationService::TextGenerationService(const ModelRegistry& registry, Metrics* metrics,
                                             const Access* access)
    : registry_(registry), metrics_(metrics), access_(access ? access : &open_access_) {}

std::string TextGenerationService::Authorization(const grpc::CallbackServerContext* context) {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  return it == metadata.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

absl::StatusOr<HostedModel*> TextGenerationService::Resolve(const std::string& name) const {
  if (!accepting_) return absl::UnavailableError("the server is shutting down; retry elsewhere");
  return registry_.Find(name);
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

grpc::ServerUnaryReactor* TextGenerationService::RunUnary(
    grpc::CallbackServerContext* context, const std::string& requested_model, const char* method,
    const ToEngineFn& to_engine, const MakeSinkFn& make_sink, std::function<void()> on_success) {
  // Before anything else: an unknown caller learns nothing and queues nothing.
  absl::StatusOr<Access::Ticket> ticket = access_->Admit(Authorization(context));
  if (!ticket.ok()) return Done(context, "", method, ticket.status());
  auto model = Resolve(requested_model);
  if (!model.ok()) return Done(context, "", method, model.status());
  HostedModel& hosted = **model;
  const std::string& name = hosted.description.name;
  absl::StatusOr<EngineRequest> engine_request = to_engine(hosted);
  if (!engine_request.ok()) return Done(context, name, method, engine_request.status());
  auto stream = NewStream(hosted, &delivery_);
  auto* reactor =
      new CollectReactor(metrics_, name, method, stream, make_sink(*engine_request, name),
                         std::move(on_success), *std::move(ticket));
  reactor->Begin();
  absl::Status queued = hosted.engine->Submit(std::move(*engine_request), stream);
  if (!queued.ok()) reactor->Fail(queued);
  return reactor;
}

grpc::ServerUnaryReactor* TextGenerationService::Generate(grpc::CallbackServerContext* context,
                                                          const GenerateRequest* request,
                                                          GenerateResponse* response) {
  std::string fingerprint;
  auto to_engine = [&](const HostedModel& model) {
    fingerprint = model.description.fingerprint;
    return ToGeneration(*request, model, DeadlineOf(context));
  };
  auto make_sink = [response, &fingerprint](const EngineRequest& engine_request,
                                            const std::string& name) {
    response->set_model(name);
    return [response, logprobs = engine_request.logprobs, fingerprint](const StreamEvent& event) {
      AppendEvent(event, logprobs, fingerprint, response);
    };
  };
  return RunUnary(context, request->model(), "Generate", to_engine, make_sink, [] {});
}

grpc::ServerWriteReactor<GenerateResponse>* TextGenerationService::GenerateStream(
    grpc::CallbackServerContext* context, const GenerateRequest* request) {
  absl::StatusOr<Access::Ticket> ticket = access_->Admit(Authorization(context));
  absl::StatusOr<HostedModel*> model =
      ticket.ok() ? Resolve(request->model()) : absl::StatusOr<HostedModel*>(ticket.status());
  absl::StatusOr<EngineRequest> engine_request =
      model.ok() ? ToGeneration(*request, **model, DeadlineOf(context))
                 : absl::StatusOr<EngineRequest>(model.status());
  if (!engine_request.ok()) {
    // A name the caller made up is not a label: it could add series without end.
    const std::string name = model.ok() ? (*model)->description.name : "";
    if (metrics_ != nullptr) {
      metrics_->CountRequest(name, "GenerateStream",
                             StatusCodeName(engine_request.status().code()));
    }
    return new RejectedStream(ToGrpcStatus(engine_request.status()));
  }
  HostedModel& hosted = **model;
  auto stream = NewStream(hosted, &delivery_);
  auto* reactor =
      new StreamReactor(metrics_, hosted.description.name, hosted.description.fingerprint, stream,
                        engine_request->logprobs, *std::move(ticket));
  reactor->Begin();
  absl::Status queued = hosted.engine->Submit(std::move(*engine_request), stream);
  if (!queued.ok()) reactor->Fail(queued);
  return reactor;
}

grpc::ServerUnaryReactor* TextGenerationService::Score(grpc::CallbackServerContext* context,
                                                       const attn::v1::ScoreRequest* request,
                                                       attn::v1::ScoreResponse* response) {
  auto to_engine = [&](const HostedModel& model) {
    return ToScoreRequest(*request, *model.tokenizer, model.engine->options().limits,
                          DeadlineOf(context));
  };
  auto make_sink = [response](const EngineRequest&, const std::string& name) {
    response->set_model(name);
    return [response](const StreamEvent& event) {
      for (int64_t id : event.token_ids) response->add_token_ids(id);
      for (float logprob : event.logprobs) response->add_logprobs(logprob);
    };
  };
  auto on_success = [response] {
    double total = 0.0;
    for (int i = 1; i < response->logprobs_size(); ++i) total += response->logprobs(i);
    response->set_total_logprob(total);
    response->set_perplexity(std::exp(-total / (response->logprobs_size() - 1)));
  };
  return RunUnary(context, request->model(), "Score", to_engine, make_sink, on_success);
}

grpc::ServerUnaryReactor* TextGenerationService::Tokenize(grpc::CallbackServerContext* context,
                                                          const attn::v1::TokenizeRequest* request,
                                                          attn::v1::TokenizeResponse* response) {
  if (absl::Status known = access_->Authenticate(Authorization(context)); !known.ok()) {
    return Done(context, "", "Tokenize", known);
  }
  auto model = Resolve(request->model());
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
  auto model = Resolve(request->model());
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
    if (!d.weight_dtype.empty()) {
      info->set_weight_dtype(d.weight_dtype);
      info->set_weight_bytes(d.weight_bytes);
    }
  }
  return Done(context, "", "ListModels", absl::OkStatus());
}

}  // namespace attn::serving
