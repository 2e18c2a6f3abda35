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
#include "server/core/call.h"

namespace attn::serving {

// The one place absl statuses become gRPC statuses.
grpc::Status ToGrpcStatus(const absl::Status& status);

class TextGenerationService final : public attn::v1::TextGeneration::CallbackService {
 public:
  // `core` (which must outlive the service) admits callers, resolves
  // models, runs calls and counts them; the service only translates.
  explicit TextGenerationService(const CallCore& core) : core_(core) {}

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
  // Finishes a call that runs on no engine at once and counts it.
  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, const std::string& model,
                                 const char* method, const absl::Status& status);

  const CallCore& core_;
};

}  // namespace attn::serving
