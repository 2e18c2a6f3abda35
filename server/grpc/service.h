// The attn.v1.TextGeneration service on the gRPC callback API. Handlers
// validate, queue work on the model's engine and return at once; results
// flow back through RequestStreams, written by reactors as they arrive. No
// model work runs on a gRPC thread.
#pragma once
#include <grpcpp/grpcpp.h>

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "attn/v1/text_generation.grpc.pb.h"
#include "server/core/access.h"
#include "server/core/admission.h"
#include "server/core/model_registry.h"
#include "server/core/validation.h"
#include "server/engine/delivery_thread.h"

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
  void StopAccepting() { admission_.StopAccepting(); }
  // The path every protocol's generation requests take (the HTTP API's
  // too), with this service's delivery thread.
  const AdmissionPath& admission() const { return admission_; }

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
  // Finishes a unary call at once and counts it.
  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, const std::string& model,
                                 const std::string& method, const absl::Status& status);

  // The value of a call's "authorization" metadata; empty without one.
  static std::string Authorization(const grpc::CallbackServerContext* context);

  const ModelRegistry& registry_;
  Metrics* metrics_;
  const Access open_access_;
  const Access* access_;
  // Writes responses for every model's streams; the engines only queue
  // events. Declared last: it stops before anything its listeners use. The
  // engines' streams point to it, so they must stop first
  // (InferenceServer::Shutdown stops them before the service goes).
  DeliveryThread delivery_;
  // Generate, GenerateStream and Score enter the engines through it.
  AdmissionPath admission_;
};

}  // namespace attn::serving
