// The attn.v1.TextGeneration service on the gRPC callback API. Handlers
// validate, queue work on the model's engine and return at once; results
// flow back through RequestStreams, written by reactors as they arrive. No
// model work runs on a gRPC thread.
#pragma once
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "attn/v1/text_generation.grpc.pb.h"
#include "server/access.h"
#include "server/delivery_thread.h"
#include "server/model_registry.h"
#include "server/validation.h"

namespace attn::serving {

class Metrics;

// The one place absl statuses become gRPC statuses.
grpc::Status ToGrpcStatus(const absl::Status& status);

class TextGenerationService final : public attn::v1::TextGeneration::CallbackService {
 public:
  // Requests are checked against each model's RequestLimits (its engine's
  // options). `access` (may be null: open to all) admits callers; every
  // method checks it before it looks at the request.
  TextGenerationService(const ModelRegistry& registry, Metrics* metrics,
                        const Access* access = nullptr);

  // New requests get UNAVAILABLE from now on (shutdown has begun).
  void StopAccepting() { accepting_ = false; }

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context,
                                     const attn::v1::GenerateRequest* request,
                                     attn::v1::GenerateResponse* response) override;
  grpc::ServerWriteReactor<attn::v1::GenerateResponse>* GenerateStream(
      grpc::CallbackServerContext* context, const attn::v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Score(grpc::CallbackServerContext* context,
                                  const attn::v1::ScoreRequest* request,
                                  attn::v1::ScoreResponse* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const attn::v1::TokenizeRequest* request,
                                     attn::v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const attn::v1::DetokenizeRequest* request,
                                       attn::v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const attn::v1::ListModelsRequest* request,
                                       attn::v1::ListModelsResponse* response) override;

 private:
  // The model a request names, or why it cannot run now.
  absl::StatusOr<HostedModel*> Resolve(const std::string& name) const;
  // The skeleton Generate and Score share: resolve the model, build the
  // engine request (to_engine), collect its events into the response
  // (make_sink returns what each event does to it; on_success runs after
  // the last), submit. Answers at once with the error if a step fails.
  using ToEngineFn = std::function<absl::StatusOr<EngineRequest>(const HostedModel&)>;
  using EventSink = std::function<void(const StreamEvent&)>;
  using MakeSinkFn = std::function<EventSink(const EngineRequest&, const std::string& model)>;
  grpc::ServerUnaryReactor* RunUnary(grpc::CallbackServerContext* context,
                                     const std::string& requested_model, const char* method,
                                     const ToEngineFn& to_engine, const MakeSinkFn& make_sink,
                                     std::function<void()> on_success);
  // Finishes a unary call at once and counts it.
  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, const std::string& model,
                                 const std::string& method, const absl::Status& status);

  // The value of a call's "authorization" metadata; empty without one.
  static std::string Authorization(const grpc::CallbackServerContext* context);

  const ModelRegistry& registry_;
  Metrics* metrics_;
  const Access open_access_;
  const Access* access_;
  std::atomic<bool> accepting_{true};
  // Writes responses for every model's streams; the engines only queue
  // events. Declared last: it stops before anything its listeners use. The
  // engines' streams point to it, so they must stop first
  // (InferenceServer::Shutdown stops them before the service goes).
  DeliveryThread delivery_;
};

}  // namespace attn::serving
