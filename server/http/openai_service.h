// The HTTP front end (docs/openai.md): OpenAI's Completions, Chat
// Completions and Models endpoints, health for HTTP probes, /metrics, and
// the chat page at /. Generation enters the engines through the same
// AdmissionPath as gRPC: the same API keys and per-key limit, validation,
// queue, batching, state cache and metrics (with protocol="http").
//
//   GET  /v1/models, /v1/models/{model}
//   POST /v1/completions, /v1/chat/completions   (stream: server-sent events)
//   GET  /health, /health/{model}                200 serving, 503 not
//   GET  /metrics, /healthz                        the Prometheus exposition, "ok"
//   GET  /                                        the chat page
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "server/core/access.h"
#include "server/core/admission.h"
#include "server/core/model_registry.h"
#include "server/http/http_server.h"
#include "server/http/openai_request.h"

namespace attn::serving {
class Metrics;
}  // namespace attn::serving

namespace attn::serving::http {

class OpenAiService {
 public:
  // Every argument must outlive the service. `metrics` may be null.
  OpenAiService(const ModelRegistry& registry, const AdmissionPath& admission, const Access& access,
                Metrics* metrics);

  // Adds every route above to `server`.
  void AddRoutes(HttpServer& server);

 private:
  void Models(const HttpRequest& request, std::shared_ptr<Reply> reply);
  void Generate(ApiKind kind, const HttpRequest& request, std::shared_ptr<Reply> reply);
  void Health(const HttpRequest& request, std::shared_ptr<Reply> reply);
  // Answers with an error object and counts the call.
  void Refuse(const std::shared_ptr<Reply>& reply, const std::string& model, const char* method,
              const absl::Status& status);
  // Counts a call that names no model.
  void Count(const char* method, absl::StatusCode code);

  const ModelRegistry& registry_;
  const AdmissionPath& admission_;
  const Access& access_;
  Metrics* metrics_;
  const int64_t created_;  // the models' `created`: when the server started
};

// GET /metrics and GET /healthz ("ok") on `server`: the metrics port's
// routes, also on the HTTP port.
void AddMetricsRoutes(HttpServer& server, const Metrics& metrics);

}  // namespace attn::serving::http
