#include "server/http/openai_service.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "model/text/chat_template.h"
#include "model/text/tokenizer.h"
#include "nlohmann/json.hpp"
#include "server/core/model_registry.h"
#include "server/http/call_adapters.h"
#include "server/http/chat_page.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"
#include "server/metrics/metrics.h"
#include "util/field_error.h"

namespace attn::serving::http {
namespace {

using Json = nlohmann::ordered_json;

const char* MethodOf(ApiKind kind) {
  return kind == ApiKind::kChat ? "ChatCompletions" : "Completions";
}

// Chat Completions' and Completions' stream: a chunk per event (the tool
// calls read out of chat replies), a usage chunk when asked, then [DONE].
class ChunkFormat : public StreamFormat {
 public:
  ChunkFormat(ResponseContext context, int64_t choices)
      : context_(std::move(context)), logs_(choices) {}

  std::string Event(int64_t index, const StreamEvent& event) override {
    ChoiceLog& log = logs_[index];
    std::vector<Json> chunks =
        context_.tool_calls != ToolCallFormat::kNone
            ? ToolCallChunks(context_, index, event, &log)
            : std::vector<Json>{StreamChunk(context_, index, event, !log.started, log.text_bytes)};
    log.started = true;
    log.text_bytes += static_cast<int64_t>(event.text.size());
    if (event.last) {
      log.done = true;
      log.last = event;
      if (Json state = StateExtension(context_, log); !state.is_null()) {
        chunks.back()["choices"][0]["attn_state"] = std::move(state);
      }
    }
    std::string out;
    for (const Json& chunk : chunks) out += ServerSentEvent(chunk);
    return out;
  }

  std::string Failed(const absl::Status& status) override {
    return ServerSentEvent(ErrorObject(status)) + kStreamDone;
  }

  std::string Done() override {
    std::string out;
    if (context_.include_usage) out += ServerSentEvent(UsageChunk(context_, logs_));
    return out + kStreamDone;
  }

 private:
  const ResponseContext context_;
  std::vector<ChoiceLog> logs_;
};

}  // namespace

OpenAiService::OpenAiService(const CallCore& core, Metrics* metrics, absl::Duration timeout)
    : core_(core),
      metrics_(metrics),
      timeout_(timeout),
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
  server.Route("POST", "/tokenize", [this](const HttpRequest& r, std::shared_ptr<Reply> reply) {
    Tokenize(r, std::move(reply));
  });
  server.Route("POST", "/detokenize", [this](const HttpRequest& r, std::shared_ptr<Reply> reply) {
    Detokenize(r, std::move(reply));
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
  reply->Send(ErrorReply(status));
  core_.Count(model, method, status.code(), Protocol::kHttp);
}

void OpenAiService::Models(const HttpRequest& request, std::shared_ptr<Reply> reply) {
  if (absl::Status known = core_.access().Authenticate(request.Header("authorization"));
      !known.ok()) {
    return Refuse(reply, "", "Models", known);
  }
  const std::string prefix = "/v1/models/";
  if (absl::StartsWith(request.path, prefix)) {
    if (request.path.size() == prefix.size()) {
      return Refuse(reply, "", "Models",
                    FieldError(absl::StatusCode::kNotFound, "model",
                               "give a model's name after /v1/models/"));
    }
    absl::StatusOr<HostedModel*> model = core_.registry().Find(request.path.substr(prefix.size()));
    if (!model.ok()) return Refuse(reply, "", "Models", model.status());
    reply->Send(JsonReply(200, ModelObject(core_.Describe(**model), created_)));
    return core_.Count("", "Models", absl::StatusCode::kOk, Protocol::kHttp);
  }
  Json data = Json::array();
  for (const auto& model : core_.registry().models()) {
    data.push_back(ModelObject(core_.Describe(*model), created_));
  }
  reply->Send(JsonReply(200, {{"object", "list"}, {"data", data}}));
  core_.Count("", "Models", absl::StatusCode::kOk, Protocol::kHttp);
}

template <typename Parsed>
const HostedModel* OpenAiService::Prepare(const HttpRequest& request,
                                          const std::shared_ptr<Reply>& reply, const char* method,
                                          absl::StatusOr<Parsed> (*parse)(absl::string_view),
                                          Parsed* parsed) {
  if (absl::Status known = core_.access().Authenticate(request.Header("authorization"));
      !known.ok()) {
    Refuse(reply, "", method, known);
    return nullptr;
  }
  absl::StatusOr<Parsed> body = parse(request.body);
  if (!body.ok()) {
    Refuse(reply, "", method, body.status());
    return nullptr;
  }
  *parsed = *std::move(body);
  absl::StatusOr<HostedModel*> model = core_.Resolve(parsed->model);
  if (!model.ok()) {
    Refuse(reply, "", method, model.status());
    return nullptr;
  }
  return *model;
}

void OpenAiService::Tokenize(const HttpRequest& request, std::shared_ptr<Reply> reply) {
  TokenizeRequest parsed;
  const HostedModel* model = Prepare(request, reply, "Tokenize", &ParseTokenizeRequest, &parsed);
  if (model == nullptr) return;
  const ModelDescription& d = model->description;
  absl::StatusOr<std::vector<int64_t>> ids =
      TokenizeFor(*model->tokenizer, model->chat_template.get(), d.chat_format, parsed.input);
  if (!ids.ok()) return Refuse(reply, d.name, "Tokenize", ids.status());
  Json body = {{"tokens", *ids},
               {"count", ids->size()},
               {"max_model_len", d.max_context > 0 ? Json(d.max_context) : Json(nullptr)}};
  reply->Send(JsonReply(200, body));
  core_.Count(d.name, "Tokenize", absl::StatusCode::kOk, Protocol::kHttp);
}

void OpenAiService::Detokenize(const HttpRequest& request, std::shared_ptr<Reply> reply) {
  DetokenizeRequest parsed;
  const HostedModel* model =
      Prepare(request, reply, "Detokenize", &ParseDetokenizeRequest, &parsed);
  if (model == nullptr) return;
  const Tokenizer& tokenizer = *model->tokenizer;
  const std::string& name = model->description.name;
  if (absl::Status valid = CheckTokenIds(tokenizer, parsed.tokens, "tokens"); !valid.ok()) {
    return Refuse(reply, name, "Detokenize", valid);
  }
  reply->Send(JsonReply(
      200, {{"prompt", DetokenizeText(tokenizer, parsed.tokens,
                                      model->description.clean_up_tokenization_spaces)}}));
  core_.Count(name, "Detokenize", absl::StatusCode::kOk, Protocol::kHttp);
}

void OpenAiService::Health(const HttpRequest& request, std::shared_ptr<Reply> reply) {
  const std::string prefix = "/health/";
  if (absl::StartsWith(request.path, prefix)) {
    if (!core_.registry().Find(request.path.substr(prefix.size())).ok()) {
      reply->Send(JsonReply(404, {{"status", "SERVICE_UNKNOWN"}}));
      return;
    }
  }
  const bool serving = core_.accepting();
  reply->Send(JsonReply(serving ? 200 : 503, {{"status", serving ? "SERVING" : "NOT_SERVING"}}));
}

void OpenAiService::Generate(ApiKind kind, const HttpRequest& request,
                             std::shared_ptr<Reply> reply) {
  const char* method = MethodOf(kind);
  const std::string authorization = request.Header("authorization");
  // The caller first, as on gRPC: an unknown one learns nothing.
  if (absl::Status known = core_.access().Authenticate(authorization); !known.ok()) {
    return Refuse(reply, "", method, known);
  }
  absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(kind, request.body);
  if (!parsed.ok()) return Refuse(reply, "", method, parsed.status());
  const OpenAiRequest& r = *parsed;
  const absl::Time deadline = DeadlineOf(request, timeout_);
  // Each choice is one engine request; the response's context is set with
  // them, before any event can come.
  auto convert = [&r, kind, deadline](const HostedModel& model, ResponseContext* context) {
    *context = NewResponseContext(kind, model.description.name, model.description.fingerprint,
                                  *model.tokenizer, r.logprobs, r.include_usage);
    if (!r.tools_json.empty() && !r.tool_choice.none) {
      context->tool_calls = ToolCallFormatOf(model);
      context->parallel_tool_calls = r.parallel_tool_calls;
    }
    return ToEngineRequests(r, TargetOf(model), deadline);
  };
  if (!r.stream) {
    auto collector = std::make_shared<CollectingCall>(core_, method, reply);
    auto context = std::make_shared<ResponseContext>();
    absl::Status started = collector->Start(
        authorization, r.model,
        [&](const HostedModel& model) { return convert(model, context.get()); },
        [context](const std::vector<ChoiceLog>& logs) {
          return CompletionResponse(*context, logs);
        });
    if (!started.ok()) reply->Send(ErrorReply(started));
    return;
  }
  ResponseContext context;
  StreamCall(
      std::make_unique<Call>(core_, method, Protocol::kHttp), reply,
      [&](Call& call, std::function<void()> wake) {
        return call.Start(
            authorization, r.model,
            [&](const HostedModel& model) { return convert(model, &context); }, std::move(wake),
            Call::WakeOn::kEngineThread);
      },
      [&] { return std::make_unique<ChunkFormat>(std::move(context), r.n); });
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
