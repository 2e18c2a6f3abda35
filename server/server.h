// The whole server: models and their engines, the gRPC service with health
// checking and reflection, the HTTP API (server/http/openai_service.h) and
// the metrics endpoint.
#pragma once
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/core/model_registry.h"
#include "server/core/tls.h"
#include "server/grpc/service.h"
#include "server/state/response_store.h"
#include "server/state/state_store.h"

namespace grpc {
class Server;
}
namespace attn::serving::http {
class HttpServer;
class OpenAiService;
class ResponsesService;
}  // namespace attn::serving::http

namespace attn::serving {

class Metrics;

struct ServerOptions {
  std::string host = "0.0.0.0";
  int port = 50051;          // 0: any free port
  int http_port = 8000;      // the HTTP API; 0: any free port; -1: none
  int metrics_port = 9090;   // 0: any free port; -1: no metrics endpoint
  std::string metrics_host;  // the metrics endpoint's address; empty: `host`
  TlsOptions tls;            // the gRPC and HTTP ports' certificates; none: plaintext
  // API keys (server/core/access.h); empty: no keys needed. The per-key limit on
  // running generation and scoring calls applies with keys; 0: none.
  std::string api_keys_file;
  int64_t max_requests_per_key = 0;
  bool reflection = true;  // serve grpc.reflection (health is always served)
  // How long an HTTP request may take (a client's X-Stainless-Timeout may
  // shorten it); InfiniteDuration: no limit. gRPC calls carry their own.
  absl::Duration http_timeout = absl::Seconds(600);
  RegistryOptions registry;       // models, device, engine options and request limits
  StateStoreOptions state_store;  // the shared state tier; no URL: none
  // The Responses API's stored responses; their Redis is the state tier's.
  ResponseStoreOptions responses;
  absl::Duration shutdown_grace = absl::Seconds(30);
};

class InferenceServer {
 public:
  // Loads the models and starts serving; errors name what to fix (a model
  // file, a taken port, a device).
  static absl::StatusOr<std::unique_ptr<InferenceServer>> Start(const ServerOptions& options);
  ~InferenceServer();  // Shutdown()s

  int port() const { return port_; }
  int http_port() const { return http_port_; }        // -1: none
  int metrics_port() const { return metrics_port_; }  // -1: none
  const ModelRegistry& registry() const { return *registry_; }
  Metrics& metrics() { return *metrics_; }

  // Graceful shutdown: health turns NOT_SERVING, new requests get
  // UNAVAILABLE, running ones get `shutdown_grace` to finish, the rest end
  // with UNAVAILABLE. Idempotent.
  void Shutdown();

 private:
  InferenceServer() = default;
  // The HTTP API (OpenAI's endpoints and the Responses API) on --http_port.
  absl::Status StartHttp();
  ServerOptions options_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<StateStore> state_store_;  // outlives the engines that use it
  std::unique_ptr<ModelRegistry> registry_;
  std::unique_ptr<Access> access_;
  // Runs every protocol's calls; after the registry, whose engines' streams
  // point to its delivery thread (Shutdown stops them first).
  std::unique_ptr<CallCore> core_;
  std::unique_ptr<TextGenerationService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<http::OpenAiService> openai_;
  std::unique_ptr<http::ResponsesService> responses_api_;
  // After the service that uses it, so it goes first: its thread's last
  // callbacks (refusals) still find the service.
  std::unique_ptr<ResponseStore> responses_;
  // Declared last, destroyed first: their connections hold streams and
  // count in metrics.
  std::unique_ptr<http::HttpServer> metrics_http_;
  std::unique_ptr<http::HttpServer> http_;
  int port_ = 0;
  int http_port_ = -1;
  int metrics_port_ = -1;
  bool shut_down_ = false;
};

}  // namespace attn::serving
