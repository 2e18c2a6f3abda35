// Real servers and streams for the in-process gRPC tests.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "attn/v1/text_generation.grpc.pb.h"
#include "server/server.h"

namespace attn::serving::testing {

// A server's options on 127.0.0.1, any free gRPC and HTTP ports, no
// metrics port, hosting the packages in `dir`.
inline ServerOptions LocalServerOptions(const std::string& dir) {
  ServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.http_port = 0;
  options.metrics_port = -1;
  options.registry.paths = {dir};
  return options;
}

// A server on 127.0.0.1 (any free gRPC, HTTP and metrics ports) hosting the
// packages in `dir`; null, with a test failure, if it does not start.
inline std::unique_ptr<InferenceServer> StartTestServer(
    const std::string& dir, EngineOptions engine = {},
    const std::string& default_model = "tiny-aft") {
  ServerOptions options = LocalServerOptions(dir);
  options.metrics_port = 0;
  options.registry.default_model = default_model;
  options.registry.engine = engine;
  options.shutdown_grace = absl::Seconds(10);
  auto server = InferenceServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

// Every message of a stream merged into `merged` (text, tokens, logprobs;
// the finish reason, usage and state of the last), and the stream's status.
inline grpc::Status StreamMerged(attn::v1::TextGeneration::Stub& stub,
                                 const attn::v1::GenerateRequest& request,
                                 attn::v1::GenerateResponse* merged, int* messages = nullptr) {
  grpc::ClientContext context;
  auto reader = stub.GenerateStream(&context, request);
  attn::v1::GenerateResponse message;
  int count = 0;
  while (reader->Read(&message)) {
    ++count;
    merged->mutable_text()->append(message.text());
    merged->mutable_token_ids()->MergeFrom(message.token_ids());
    merged->mutable_logprobs()->MergeFrom(message.logprobs());
    if (message.has_finish_reason()) {
      merged->set_finish_reason(message.finish_reason());
      *merged->mutable_usage() = message.usage();
      merged->set_state(message.state());
      merged->set_state_tokens(message.state_tokens());
      *merged->mutable_state_token_ids() = message.state_token_ids();
    }
  }
  if (messages) *messages = count;
  return reader->Finish();
}

}  // namespace attn::serving::testing
