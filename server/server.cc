#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"
#include "server/core/access.h"
#include "server/http/http_server.h"
#include "server/http/openai_service.h"
#include "server/http/responses_service.h"
#include "server/metrics/metrics.h"
#include "server/state/redis_state_store.h"

namespace attn::serving {
namespace {

http::HttpServerOptions HttpOptions(const std::string& host, int port, const TlsOptions* tls) {
  http::HttpServerOptions options;
  options.host = host;
  options.port = port;
  if (tls != nullptr) {
    options.tls_cert = tls->cert;
    options.tls_key = tls->key;
    options.tls_client_ca = tls->client_ca;
    options.tls_reload_seconds = tls->reload_seconds;
  }
  return options;
}

// The largest gRPC request a client may send: a state this server returned
// (--max_exported_state_bytes; a mamba2-130m state is 19 MB, a hybrid's
// more) with its prompt beside it; at least 16 MiB. (HTTP bodies keep
// their 4 MiB: large states travel over gRPC.)
int ReceiveLimit(const ServerOptions& options) {
  const int64_t exported = options.registry.engine.max_exported_state_bytes;
  if (exported <= 0) return std::numeric_limits<int>::max();  // no bound asked for
  const int64_t wanted = std::min<int64_t>(exported + (1 << 20), std::numeric_limits<int>::max());
  return static_cast<int>(std::max<int64_t>(16 << 20, wanted));
}

// A port's error names the flag that chose it.
absl::Status PortError(const absl::Status& status, const char* flag) {
  return absl::Status(status.code(),
                      absl::StrCat(status.message(), "; is the port taken? choose another ", flag));
}

}  // namespace

absl::StatusOr<std::unique_ptr<InferenceServer>> InferenceServer::Start(
    const ServerOptions& options) {
  std::unique_ptr<InferenceServer> server(new InferenceServer());
  server->options_ = options;
  server->metrics_ = std::make_unique<Metrics>();
  grammar::GrammarCache::Shared().SetObserver(server->metrics_->grammar_observer());
  // Credentials and keys before the models: a mistake there is cheap to report.
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (options.tls.enabled()) {
    auto tls = TlsServerCredentialsFor(options.tls);
    if (!tls.ok()) return tls.status();
    credentials = *std::move(tls);
  }
  server->access_ = std::make_unique<Access>();
  if (!options.api_keys_file.empty()) {
    auto access = Access::FromFile(options.api_keys_file, options.max_requests_per_key);
    if (!access.ok()) return access.status();
    server->access_ = *std::move(access);
    if (!options.tls.enabled() && options.host != "127.0.0.1" && options.host != "localhost") {
      std::fprintf(stderr,
                   "warning: API keys travel in plaintext on %s; set --tls_cert and --tls_key\n",
                   options.host.c_str());
    }
  }
  // Metrics before the models, so a scrape can watch a slow start.
  if (options.metrics_port >= 0) {
    const std::string& host = options.metrics_host.empty() ? options.host : options.metrics_host;
    server->metrics_http_ = std::make_unique<http::HttpServer>();
    http::AddMetricsRoutes(*server->metrics_http_, *server->metrics_);
    auto bound = server->metrics_http_->Start(HttpOptions(host, options.metrics_port, nullptr));
    if (!bound.ok()) return PortError(bound.status(), "--metrics_port");
    server->metrics_port_ = *bound;
  }
  RegistryOptions registry_options = options.registry;
  if (!options.state_store.url.empty()) {
    auto store = RedisStateStore::Start(options.state_store, server->metrics_->AddStateStore());
    if (!store.ok()) return store.status();
    server->state_store_ = *std::move(store);
    registry_options.state_store = server->state_store_.get();
  }
  auto registry = ModelRegistry::Load(registry_options, server->metrics_.get());
  if (!registry.ok()) return registry.status();
  server->registry_ = std::move(*registry);
  server->core_ =
      std::make_unique<CallCore>(*server->registry_, *server->access_, server->metrics_.get());
  server->service_ = std::make_unique<TextGenerationService>(*server->core_);

  grpc::EnableDefaultHealthCheckService(true);
  // The plugin is process-wide: once on, every later server has reflection.
  if (options.reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(options.host, ":", options.port);
  builder.AddListeningPort(address, credentials, &server->port_);
  builder.RegisterService(server->service_.get());
  builder.SetMaxReceiveMessageSize(ReceiveLimit(options));
  server->server_ = builder.BuildAndStart();
  if (!server->server_ || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve gRPC on ", address,
                                               "; is the port taken? choose another --port"));
  }
  grpc::HealthCheckServiceInterface* health = server->server_->GetHealthCheckService();
  health->SetServingStatus(true);  // "" and every registered service
  health->SetServingStatus("attn.v1.TextGeneration", true);
  for (const auto& model : server->registry_->models()) {
    health->SetServingStatus(model->description.name, true);
  }
  if (options.http_port >= 0) {
    if (absl::Status http = server->StartHttp(); !http.ok()) return http;
  }
  return server;
}

absl::Status InferenceServer::StartHttp() {
  const ServerOptions& options = options_;
  openai_ = std::make_unique<http::OpenAiService>(*core_, metrics_.get(), options.http_timeout);
  http_ = std::make_unique<http::HttpServer>();
  openai_->AddRoutes(*http_);
  // Stored responses live in the state tier's Redis, when there is one.
  ResponseStoreOptions responses = options.responses;
  responses.redis_url = options.state_store.url;
  auto store = ResponseStore::Start(responses, metrics_->AddResponseStore());
  if (!store.ok()) return store.status();
  responses_ = *std::move(store);
  responses_api_ =
      std::make_unique<http::ResponsesService>(*core_, *responses_, options.http_timeout);
  responses_api_->AddRoutes(*http_);
  auto bound = http_->Start(
      HttpOptions(options.host, options.http_port, options.tls.enabled() ? &options.tls : nullptr));
  if (!bound.ok()) return PortError(bound.status(), "--http_port");
  http_port_ = *bound;
  return absl::OkStatus();
}

void InferenceServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // Health first, so load balancers stop sending work while streams finish.
  server_->GetHealthCheckService()->Shutdown();
  core_->StopAccepting();
  registry_->DrainAll();
  registry_->WaitIdleAll(absl::Now() + options_.shutdown_grace);
  registry_->StopAll(absl::UnavailableError(
      "the server shut down before this request finished; retry it elsewhere"));
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server_->Wait();
  if (http_) http_->Stop();
  if (metrics_http_) metrics_http_->Stop();
}

InferenceServer::~InferenceServer() {
  if (server_) Shutdown();
  grammar::GrammarCache::Shared().ClearObserver(metrics_->grammar_observer());
}

}  // namespace attn::serving
