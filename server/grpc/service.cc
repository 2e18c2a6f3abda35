#include "server/grpc/service.h"

#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "model/text/tokenizer.h"
#include "server/core/validation.h"
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

// A gRPC call on the engines: a Call (server/core/call.h) written by gRPC's
// unary or write reactor (`Base`). A subclass says what events become
// (TakeEventsLocked); this writes them one batch at a time and finishes
// the RPC once, after its last write.
template <typename Base>
class EngineCallReactor : public Base {
 public:
  EngineCallReactor(const CallCore& core, const char* method)
      : call_(core, method, Protocol::kGrpc) {}

  // Starts the call, or finishes the RPC with the reason it was refused.
  void Start(const std::string& authorization, const std::string& model,
             const Call::Convert& convert) {
    absl::Status started = call_.Start(authorization, model, convert, [this] { Pump(); });
    if (started.ok()) return;
    absl::MutexLock lock(&mu_);
    FinishLocked(started);
  }

  void OnCancel() override {
    call_.Cancel();
    absl::MutexLock lock(&mu_);
    // A write in flight finishes the RPC when it completes.
    if (!writing_) FinishLocked(absl::CancelledError("cancelled"));
  }
  void OnDone() override {
    // Waits for a wake in flight (it takes mu_, so not under it); none
    // starts after it.
    call_.Detach();
    delete this;
  }

 protected:
  // Takes a batch of successful events (the last one may end the call);
  // returns whether it started a write (the next batch waits for
  // WriteDone). Runs under mu_.
  virtual bool TakeEventsLocked(const std::vector<ChoiceEvent>& events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;

  // A write started by TakeEventsLocked completed.
  void WriteDone(bool ok) {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      call_.Cancel();
      FinishLocked(absl::CancelledError("the client stopped reading"));
      return;
    }
    PumpLocked();
  }

  // The RPC's outcome is known: the call's too (unless it already was,
  // cancelled), and the RPC finishes, once.
  void FinishLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    call_.Finish(status);
    if (rpc_finished_) return;
    rpc_finished_ = true;
    this->Finish(ToGrpcStatus(status));
  }
  // The last message goes out with the RPC's status in one operation
  // (StartWriteAndFinish): records the outcome without Finish.
  void MarkFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    call_.Finish(absl::OkStatus());
    rpc_finished_ = true;
  }

  const ModelDescription& model() const { return call_.model()->description; }

  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;

 private:
  void Pump() {
    absl::MutexLock lock(&mu_);
    PumpLocked();
  }
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (!writing_ && !rpc_finished_) {
      if (std::optional<absl::Status> outcome = call_.outcome()) {  // cancelled
        FinishLocked(*outcome);
        return;
      }
      std::vector<ChoiceEvent> events;
      absl::Status popped = call_.Pop(&events);
      if (!popped.ok()) {
        FinishLocked(popped);
        return;
      }
      if (events.empty()) return;
      writing_ = TakeEventsLocked(events);
    }
  }

  Call call_;
  bool rpc_finished_ ABSL_GUARDED_BY(mu_) = false;
};

// Writes a request's events as stream messages, one write at a time; a
// write completing pulls what queued meanwhile, so the RequestStream's bound
// is the only buffer. A reader that keeps up gets one message per token; one
// that falls behind (or a server short of CPU) gets the queued tokens merged
// into one message, which costs far less than a message each.
class StreamReactor : public EngineCallReactor<grpc::ServerWriteReactor<GenerateResponse>> {
 public:
  StreamReactor(const CallCore& core, bool logprobs)
      : EngineCallReactor(core, "GenerateStream"), logprobs_(logprobs) {}

  void OnWriteDone(bool ok) override { WriteDone(ok); }

 private:
  bool TakeEventsLocked(const std::vector<ChoiceEvent>& events) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const StreamEvent& event = events.front().event;  // one choice
    response_.Clear();
    response_.set_model(model().name);
    AppendEvent(event, logprobs_, model().fingerprint, &response_);
    if (event.last) {
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
  CollectReactor(const CallCore& core, const char* method, OnEvent on_event,
                 std::function<void()> on_success)
      : EngineCallReactor(core, method),
        on_event_(std::move(on_event)),
        on_success_(std::move(on_success)) {}

 private:
  bool TakeEventsLocked(const std::vector<ChoiceEvent>& events) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const StreamEvent& event = events.front().event;  // one choice
    on_event_(model(), event);
    if (event.last) {
      on_success_();
      FinishLocked(absl::OkStatus());
    }
    return false;
  }

  OnEvent on_event_;
  std::function<void()> on_success_;
};

// The one choice of a gRPC request.
Call::Convert OneChoice(std::function<absl::StatusOr<EngineRequest>(const HostedModel&)> convert) {
  return [convert = std::move(convert)](
             const HostedModel& model) -> absl::StatusOr<std::vector<EngineRequest>> {
    absl::StatusOr<EngineRequest> request = convert(model);
    if (!request.ok()) return request.status();
    std::vector<EngineRequest> choices;
    choices.push_back(*std::move(request));
    return choices;
  };
}

// The value of a call's "authorization" metadata; empty without one.
std::string AuthorizationOf(const grpc::CallbackServerContext* context) {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  return it == metadata.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

grpc::ServerUnaryReactor* TextGenerationService::Done(grpc::CallbackServerContext* context,
                                                      const std::string& model, const char* method,
                                                      const absl::Status& status) {
  core_.Count(model, method, status.code(), Protocol::kGrpc);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* TextGenerationService::Generate(grpc::CallbackServerContext* context,
                                                          const GenerateRequest* request,
                                                          GenerateResponse* response) {
  auto* reactor = new CollectReactor(
      core_, "Generate",
      [response, logprobs = request->logprobs()](const ModelDescription& model,
                                                 const StreamEvent& event) {
        response->set_model(model.name);
        AppendEvent(event, logprobs, model.fingerprint, response);
      },
      [] {});
  reactor->Start(AuthorizationOf(context), request->model(),
                 OneChoice([request, deadline = DeadlineOf(context)](const HostedModel& model) {
                   return ToGeneration(*request, model, deadline);
                 }));
  return reactor;
}

grpc::ServerWriteReactor<GenerateResponse>* TextGenerationService::GenerateStream(
    grpc::CallbackServerContext* context, const GenerateRequest* request) {
  auto* reactor = new StreamReactor(core_, request->logprobs());
  reactor->Start(AuthorizationOf(context), request->model(),
                 OneChoice([request, deadline = DeadlineOf(context)](const HostedModel& model) {
                   return ToGeneration(*request, model, deadline);
                 }));
  return reactor;
}

grpc::ServerUnaryReactor* TextGenerationService::Score(grpc::CallbackServerContext* context,
                                                       const attn::v1::ScoreRequest* request,
                                                       attn::v1::ScoreResponse* response) {
  auto* reactor = new CollectReactor(
      core_, "Score",
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
  reactor->Start(AuthorizationOf(context), request->model(),
                 OneChoice([request, deadline = DeadlineOf(context)](const HostedModel& model) {
                   return ToScoreRequest(*request, *model.tokenizer, model.engine->options().limits,
                                         deadline);
                 }));
  return reactor;
}

grpc::ServerUnaryReactor* TextGenerationService::Tokenize(grpc::CallbackServerContext* context,
                                                          const attn::v1::TokenizeRequest* request,
                                                          attn::v1::TokenizeResponse* response) {
  if (absl::Status known = core_.access().Authenticate(AuthorizationOf(context)); !known.ok()) {
    return Done(context, "", "Tokenize", known);
  }
  auto model = core_.Resolve(request->model());
  if (!model.ok()) return Done(context, "", "Tokenize", model.status());
  const HostedModel& hosted = **model;
  const std::string& name = hosted.description.name;
  TokenizeInput input;
  if (request->has_text()) input.text = request->text();
  for (const auto& message : request->messages()) {
    input.messages.push_back({message.role(), message.content()});
  }
  if (request->has_add_generation_prompt()) {
    input.add_generation_prompt = request->add_generation_prompt();
  }
  if (request->has_add_special_tokens()) input.add_special_tokens = request->add_special_tokens();
  absl::StatusOr<std::vector<int64_t>> ids = TokenizeFor(
      *hosted.tokenizer, hosted.chat_template.get(), hosted.description.chat_format, input);
  if (!ids.ok()) return Done(context, name, "Tokenize", ids.status());
  response->set_model(name);
  for (int64_t id : *ids) response->add_token_ids(id);
  response->set_count(static_cast<int64_t>(ids->size()));
  if (hosted.description.max_context > 0) {
    response->set_max_model_len(hosted.description.max_context);
  }
  return Done(context, name, "Tokenize", absl::OkStatus());
}

grpc::ServerUnaryReactor* TextGenerationService::Detokenize(
    grpc::CallbackServerContext* context, const attn::v1::DetokenizeRequest* request,
    attn::v1::DetokenizeResponse* response) {
  if (absl::Status known = core_.access().Authenticate(AuthorizationOf(context)); !known.ok()) {
    return Done(context, "", "Detokenize", known);
  }
  auto model = core_.Resolve(request->model());
  if (!model.ok()) return Done(context, "", "Detokenize", model.status());
  const std::string& name = (*model)->description.name;
  std::vector<int64_t> ids(request->token_ids().begin(), request->token_ids().end());
  absl::Status valid = CheckTokenIds(*(*model)->tokenizer, ids, "token_ids");
  if (!valid.ok()) return Done(context, name, "Detokenize", valid);
  response->set_model(name);
  response->set_text(DetokenizeText(*(*model)->tokenizer, ids,
                                    (*model)->description.clean_up_tokenization_spaces));
  return Done(context, name, "Detokenize", absl::OkStatus());
}

grpc::ServerUnaryReactor* TextGenerationService::ListModels(
    grpc::CallbackServerContext* context, const attn::v1::ListModelsRequest* /*request*/,
    attn::v1::ListModelsResponse* response) {
  if (absl::Status known = core_.access().Authenticate(AuthorizationOf(context)); !known.ok()) {
    return Done(context, "", "ListModels", known);
  }
  for (const auto& model : core_.registry().models()) {
    *response->add_models() = core_.Describe(*model);
  }
  return Done(context, "", "ListModels", absl::OkStatus());
}

}  // namespace attn::serving
