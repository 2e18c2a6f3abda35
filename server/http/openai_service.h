// The HTTP front end (docs/openai.md): OpenAI's Completions, Chat
// Completions and Models endpoints, health for HTTP probes, /metrics, and
// the chat page at /. Requests run as Calls of the server's CallCore, as
// gRPC's do: the same API keys and per-key limit, validation, queue,
// batching, state cache and metrics (with protocol="http").
//
//   GET  /v1/models, /v1/models/{model}
//   POST /v1/completions, /v1/chat/completions   (stream: server-sent events)
//   POST /tokenize, /detokenize                   vLLM's tokenize endpoints
//   GET  /health, /health/{model}                200 serving, 503 not
//   GET  /metrics, /healthz                        the Prometheus exposition, "ok"
//   GET  /                                        the chat page
// The Responses API is beside it (responses_service.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/time/time.h"
#include "server/core/call.h"
#include "server/http/http_server.h"
#include "server/http/openai_request.h"

namespace attn::serving {
class Metrics;
}  // namespace attn::serving

namespace attn::serving::http {

class OpenAiService {
 public:
  // `core` (which must outlive the service) admits callers, resolves
  // models, runs calls and counts them; the service only translates.
  // `metrics` (may be null) is served at /metrics. A request must be done
  // within `timeout` (InfiniteDuration: no limit), or sooner when its
  // client says so (X-Stainless-Timeout); then it ends with 504.
  OpenAiService(const CallCore& core, Metrics* metrics, absl::Duration timeout);

  // Adds every route above to `server`.
  void AddRoutes(HttpServer& server);

 private:
  void Models(const HttpRequest& request, std::shared_ptr<Reply> reply);
  void Generate(ApiKind kind, const HttpRequest& request, std::shared_ptr<Reply> reply);
  void Health(const HttpRequest& request, std::shared_ptr<Reply> reply);
  void Tokenize(const HttpRequest& request, std::shared_ptr<Reply> reply);
  void Detokenize(const HttpRequest& request, std::shared_ptr<Reply> reply);
  // A request that names a model: the caller authenticated, the body
  // parsed into `*parsed` by `parse`, the model resolved; null after
  // refusing otherwise.
  template <typename Parsed>
  const HostedModel* Prepare(const HttpRequest& request, const std::shared_ptr<Reply>& reply,
                             const char* method, absl::StatusOr<Parsed> (*parse)(absl::string_view),
                             Parsed* parsed);
  // Answers with an error object and counts the call.
  void Refuse(const std::shared_ptr<Reply>& reply, const std::string& model, const char* method,
              const absl::Status& status);

  const CallCore& core_;
  Metrics* const metrics_;
  const absl::Duration timeout_;
  const int64_t created_;  // the models' `created`: when the server started
};

// GET /metrics and GET /healthz ("ok") on `server`: the metrics port's
// routes, also on the HTTP port.
void AddMetricsRoutes(HttpServer& server, const Metrics& metrics);

}  // namespace attn::serving::http
