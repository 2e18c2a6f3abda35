#include "server/http/openai_service.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "server/core/model_registry.h"
#include "server/http/chat_page.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"
#include "server/metrics/metrics.h"

namespace attn::serving::http {
namespace {

using Json = nlohmann::ordered_json;

HttpResponse JsonReply(int status, const Json& body) {
  HttpResponse response;
  response.status = status;
  response.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return response;
}

const char* MethodOf(ApiKind kind) {
  return kind == ApiKind::kChat ? "ChatCompletions" : "Completions";
}

// Forwards a stream's wake-ups to its connection once the connection has
// given its waker: a stream may have events before the response starts.
class WakeRelay {
 public:
  void Wake() {
    Waker waker;
    {
      absl::MutexLock lock(&mu_);
      if (!waker_) {
        pending_ = true;
        return;
      }
      waker = waker_;
    }
    waker();
  }
  void Set(Waker waker) {
    bool pending = false;
    {
      absl::MutexLock lock(&mu_);
      waker_ = waker;
      pending = pending_;
    }
    if (pending) waker();
  }

 private:
  absl::Mutex mu_;
  Waker waker_ ABSL_GUARDED_BY(mu_);
  bool pending_ ABSL_GUARDED_BY(mu_) = false;
};

// The events a choice queued, as one: a reader that fell behind gets them
// in one chunk instead of one each, as gRPC merges them into one message.
StreamEvent Merge(std::vector<StreamEvent> events) {
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

// What the calls of one request share: its choices' streams and tickets,
// and its count in metrics, once.
class CallBase {
 public:
  CallBase(Metrics* metrics, const char* method, std::string model)
      : metrics_(metrics), method_(method), model_(std::move(model)) {}

  void Hold(std::vector<Admission> admissions) {
    for (Admission& a : admissions) {
      streams_.push_back(std::move(a.stream));
      tickets_.push_back(std::move(a.ticket));
    }
    logs_.resize(streams_.size());
  }

 protected:
  void CancelAll() {
    for (const auto& stream : streams_) {
      if (stream) stream->Cancel();
    }
  }
  // Records the request's outcome once.
  void Count(absl::StatusCode code) {
    if (counted_) return;
    counted_ = true;
    if (metrics_ != nullptr) {
      metrics_->CountRequest(model_, method_, StatusCodeName(code), Protocol::kHttp);
    }
  }
  // Whether every choice has ended (none is held yet: no).
  bool AllDone() const {
    if (logs_.empty()) return false;
    for (const ChoiceLog& log : logs_) {
      if (!log.done) return false;
    }
    return true;
  }

  Metrics* const metrics_;
  const char* const method_;
  const std::string model_;
  std::vector<std::shared_ptr<RequestStream>> streams_;
  std::vector<Access::Ticket> tickets_;
  std::vector<ChoiceLog> logs_;
  bool counted_ = false;
};

// A streamed response: the connection pulls server-sent events whenever
// its last write is done, so the choices' bounded queues are the only
// buffer between the engine and a slow client.
class StreamingCall : public StreamSource, public CallBase {
 public:
  StreamingCall(ResponseContext context, Metrics* metrics, const char* method)
      : CallBase(metrics, method, context.model), context_(std::move(context)) {}
  ~StreamingCall() override {
    for (const auto& stream : streams_) stream->ClearListener();
    CancelAll();
    Count(absl::StatusCode::kCancelled);
  }

  std::string Pull(bool* done) override {
    std::string out;
    for (size_t i = 0; i < streams_.size() && !finished_; ++i) {
      if (logs_[i].done) continue;
      std::vector<StreamEvent> events = streams_[i]->PopReady();
      if (events.empty()) continue;
      if (!events.front().status.ok()) {
        Fail(events.front().status, &out);
        break;
      }
      out += Chunk(static_cast<int64_t>(i), Merge(std::move(events)));
    }
    if (!finished_ && AllDone()) {
      if (context_.include_usage) out += ServerSentEvent(UsageChunk(context_, logs_));
      out += kStreamDone;
      Finish(absl::StatusCode::kOk);
    }
    *done = finished_;
    return out;
  }

  void Cancel() override {
    CancelAll();
    Finish(absl::StatusCode::kCancelled);
  }

 private:
  std::string Chunk(int64_t index, const StreamEvent& event) {
    ChoiceLog& log = logs_[index];
    Json chunk = StreamChunk(context_, index, event, !log.started, log.text_bytes);
    log.started = true;
    log.text_bytes += static_cast<int64_t>(event.text.size());
    if (event.last) {
      log.done = true;
      log.last = event;
      if (Json state = StateExtension(context_, log); !state.is_null()) {
        chunk["choices"][0]["attn_state"] = std::move(state);
      }
    }
    return ServerSentEvent(chunk);
  }

  // A choice failed after the response began: the error as an event, then
  // the end; the other choices stop.
  void Fail(const absl::Status& status, std::string* out) {
    *out += ServerSentEvent(ErrorObject(status));
    *out += kStreamDone;
    CancelAll();
    Finish(status.code());
  }

  // The outcome is known: the caller's admission goes back before the last
  // bytes go out, so that a client that sends its next request as soon as
  // it has them finds its key's limit free.
  void Finish(absl::StatusCode code) {
    finished_ = true;
    tickets_.clear();
    Count(code);
  }

  const ResponseContext context_;
  bool finished_ = false;
};

// A whole response: gathers every choice's events on the delivery thread
// and answers once all are done. Its streams' listeners hold it until then.
class CollectingCall : public CallBase, public std::enable_shared_from_this<CollectingCall> {
 public:
  CollectingCall(ResponseContext context, Metrics* metrics, const char* method,
                 std::shared_ptr<Reply> reply)
      : CallBase(metrics, method, context.model),
        context_(std::move(context)),
        reply_(std::move(reply)) {}

  void Start(std::vector<Admission> admissions) {
    {
      absl::MutexLock lock(&mu_);
      Hold(std::move(admissions));
    }
    // A client that hangs up before the answer frees its choices' slots.
    reply_->OnHangUp([weak = weak_from_this()] {
      if (auto call = weak.lock()) call->HangUp();
    });
    Collect();  // events that came before the streams were held
  }

  void Collect() {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    for (size_t i = 0; i < streams_.size(); ++i) {
      if (logs_[i].done) continue;
      for (const StreamEvent& event : streams_[i]->PopReady()) {
        if (!event.status.ok()) return FinishLocked(event.status);
        logs_[i].Add(event);
      }
    }
    if (AllDone()) FinishLocked(absl::OkStatus());
  }

 private:
  void HangUp() {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    CancelAll();
    Release();
    Count(absl::StatusCode::kCancelled);
  }

  void FinishLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    finished_ = true;
    if (!status.ok()) CancelAll();
    Release();  // before the answer: see StreamingCall::Finish
    Count(status.code());
    if (status.ok()) {
      reply_->Send(JsonReply(200, CompletionResponse(context_, logs_)));
    } else {
      reply_->Send(JsonReply(HttpStatusOf(status.code()), ErrorObject(status)));
    }
  }

  // Lets the streams go, and the caller's admission with them. They hold
  // this call through their listeners; whoever runs a listener holds its
  // stream, so none goes while it runs.
  void Release() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    streams_.clear();
    tickets_.clear();
  }

  absl::Mutex mu_;
  const ResponseContext context_;
  const std::shared_ptr<Reply> reply_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

// What converting a request needs of `model`.
RequestTarget TargetOf(const HostedModel& model) {
  RequestTarget target;
  target.tokenizer = model.tokenizer.get();
  target.limits = model.engine->options().limits;
  ParseChatFormat(model.description.chat_format, &target.chat_format);
  target.state = {model.description.name, model.description.fingerprint,
                  model.engine->state_budget_bytes()};
  target.initial_states = &model.initial_states;
  return target;
}

Json ModelObject(const HostedModel& model, bool is_default, int64_t created) {
  const ModelDescription& d = model.description;
  Json initial_states = Json::array();
  for (const auto& [name, state] : model.initial_states) initial_states.push_back(name);
  Json extension = {{"architecture", d.architecture},
                    {"mixer", d.mixer},
                    {"backend", d.backend},
                    {"device", d.device},
                    {"parameters", d.parameters},
                    {"vocab_size", d.vocab_size},
                    {"max_context", d.max_context},
                    {"state_bytes_per_sequence", d.state_bytes_per_sequence},
                    {"layers", d.layers},
                    {"d_model", d.d_model},
                    {"max_active_sequences", model.engine->options().max_active},
                    {"state_cache_bytes", model.engine->options().state_cache_bytes},
                    {"chat_format", d.chat_format},
                    {"initial_states", initial_states},
                    {"is_default", is_default}};
  if (!d.weight_dtype.empty()) {
    extension["weight_dtype"] = d.weight_dtype;
    extension["weight_bytes"] = d.weight_bytes;
  }
  return {{"id", d.name},
          {"object", "model"},
          {"created", created},
          {"owned_by", "attn"},
          {"attn", extension}};
}

}  // namespace

OpenAiService::OpenAiService(const ModelRegistry& registry, const AdmissionPath& admission,
                             const Access& access, Metrics* metrics)
    : registry_(registry),
      admission_(admission),
      access_(access),
      metrics_(metrics),
      created_(absl::ToUnixSeconds(absl::Now())) {}

void OpenAiService::AddRoutes(HttpServer& server) {
  server.Route("GET", "/v1/models", [this](const HttpRequest& r, std::shared_ptr<Reply> reply) {
    Models(r, std::move(reply));
  });
  server.Route("GET", "/v1/models/", [this](const HttpRequest& r, std::shared_ptr<Reply> reply) {
    Models(r, std::move(reply));
  });
  server.Route("POST", "/v1/completions",
               [this](const HttpRequest& r, std::shared_ptr<Reply> reply) {
                 Generate(ApiKind::kCompletions, r, std::move(reply));
               });
  server.Route("POST", "/v1/chat/completions",
               [this](const HttpRequest& r, std::shared_ptr<Reply> reply) {
                 Generate(ApiKind::kChat, r, std::move(reply));
               });
  for (const char* path : {"/health", "/health/"}) {
    server.Route("GET", path, [this](const HttpRequest& r, std::shared_ptr<Reply> reply) {
      Health(r, std::move(reply));
    });
  }
  server.Route("GET", "/", [](const HttpRequest&, std::shared_ptr<Reply> reply) {
    HttpResponse page;
    page.content_type = "text/html; charset=utf-8";
    page.body = std::string(ChatPage());
    page.headers.push_back({"Content-Security-Policy",
                            "default-src 'self'; script-src 'unsafe-inline'; "
                            "style-src 'unsafe-inline'"});
    reply->Send(std::move(page));
  });
  if (metrics_ != nullptr) AddMetricsRoutes(server, *metrics_);
}

void OpenAiService::Refuse(const std::shared_ptr<Reply>& reply, const std::string& model,
                           const char* method, const absl::Status& status) {
  reply->Send(JsonReply(HttpStatusOf(status.code()), ErrorObject(status)));
  if (metrics_ != nullptr) {
    metrics_->CountRequest(model, method, StatusCodeName(status.code()), Protocol::kHttp);
  }
}

void OpenAiService::Count(const char* method, absl::StatusCode code) {
  if (metrics_ != nullptr)
    metrics_->CountRequest("", method, StatusCodeName(code), Protocol::kHttp);
}

void OpenAiService::Models(const HttpRequest& request, std::shared_ptr<Reply> reply) {
  if (absl::Status known = access_.Authenticate(request.Header("authorization")); !known.ok()) {
    return Refuse(reply, "", "Models", known);
  }
  const std::string prefix = "/v1/models/";
  if (absl::StartsWith(request.path, prefix)) {
    absl::StatusOr<HostedModel*> model = registry_.Find(request.path.substr(prefix.size()));
    if (request.path.size() == prefix.size()) {
      return Refuse(reply, "", "Models",
                    absl::NotFoundError("model: give a model's name after /v1/models/"));
    }
    if (!model.ok()) return Refuse(reply, "", "Models", model.status());
    const bool is_default = (*model)->description.name == registry_.default_model();
    reply->Send(JsonReply(200, ModelObject(**model, is_default, created_)));
    return Count("Models", absl::StatusCode::kOk);
  }
  Json data = Json::array();
  for (const auto& model : registry_.models()) {
    data.push_back(
        ModelObject(*model, model->description.name == registry_.default_model(), created_));
  }
  reply->Send(JsonReply(200, {{"object", "list"}, {"data", data}}));
  Count("Models", absl::StatusCode::kOk);
}

void OpenAiService::Health(const HttpRequest& request, std::shared_ptr<Reply> reply) {
  const std::string prefix = "/health/";
  if (absl::StartsWith(request.path, prefix)) {
    if (!registry_.Find(request.path.substr(prefix.size())).ok()) {
      reply->Send(JsonReply(404, {{"status", "SERVICE_UNKNOWN"}}));
      return;
    }
  }
  const bool serving = admission_.accepting();
  reply->Send(JsonReply(serving ? 200 : 503, {{"status", serving ? "SERVING" : "NOT_SERVING"}}));
}

void OpenAiService::Generate(ApiKind kind, const HttpRequest& request,
                             std::shared_ptr<Reply> reply) {
  const char* method = MethodOf(kind);
  const std::string authorization = request.Header("authorization");
  // The caller first, as on gRPC: an unknown one learns nothing.
  if (absl::Status known = access_.Authenticate(authorization); !known.ok()) {
    return Refuse(reply, "", method, known);
  }
  absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(kind, request.body);
  if (!parsed.ok()) return Refuse(reply, "", method, parsed.status());
  absl::StatusOr<HostedModel*> resolved = admission_.Resolve(parsed->model);
  if (!resolved.ok()) return Refuse(reply, "", method, resolved.status());
  const HostedModel& model = **resolved;
  const std::string& name = model.description.name;
  absl::StatusOr<std::vector<EngineRequest>> choices =
      ToEngineRequests(*parsed, TargetOf(model), absl::InfiniteFuture());
  if (!choices.ok()) return Refuse(reply, name, method, choices.status());
  ResponseContext context =
      NewResponseContext(kind, name, model.description.fingerprint, *model.tokenizer,
                         parsed->logprobs, parsed->include_usage);

  // Each choice is admitted on its own (its own ticket against the key's
  // limit); a refusal of any refuses the request and stops the others.
  std::shared_ptr<WakeRelay> relay;
  std::shared_ptr<CollectingCall> collector;
  std::function<void()> on_events;
  if (parsed->stream) {
    relay = std::make_shared<WakeRelay>();
    on_events = [relay] { relay->Wake(); };
  } else {
    collector = std::make_shared<CollectingCall>(context, metrics_, method, reply);
    on_events = [collector] { collector->Collect(); };
  }
  std::vector<Admission> admissions;
  for (EngineRequest& choice : *choices) {
    Admission admission = admission_.Admit(
        authorization, name,
        [&choice](const HostedModel&) -> absl::StatusOr<EngineRequest> {
          return std::move(choice);
        },
        on_events);
    if (!admission.status.ok()) {
      for (Admission& admitted : admissions) admitted.stream->Cancel();
      return Refuse(reply, name, method, admission.status);
    }
    admissions.push_back(std::move(admission));
  }
  if (collector) return collector->Start(std::move(admissions));
  auto call = std::make_shared<StreamingCall>(std::move(context), metrics_, method);
  call->Hold(std::move(admissions));
  relay->Set(reply->Stream(200, "text/event-stream", std::move(call)));
}

void AddMetricsRoutes(HttpServer& server, const Metrics& metrics) {
  server.Route("GET", "/metrics", [&metrics](const HttpRequest&, std::shared_ptr<Reply> reply) {
    HttpResponse response;
    response.content_type = "text/plain; version=0.0.4; charset=utf-8";
    response.body = metrics.Exposition();
    reply->Send(std::move(response));
  });
  // The metrics port's liveness probe, which needs no model.
  server.Route("GET", "/healthz", [](const HttpRequest&, std::shared_ptr<Reply> reply) {
    HttpResponse response;
    response.content_type = "text/plain; charset=utf-8";
    response.body = "ok\n";
    reply->Send(std::move(response));
  });
}

}  // namespace attn::serving::http
