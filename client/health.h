// attnctl health: the standard grpc.health.v1 Check.
#pragma once
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

namespace attn::client {

// Prints the serving status of `service` ("" = the server overall, or a
// model's name); returns 0 for SERVING, 1 otherwise.
int CheckHealth(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                double timeout_s);

// "OK", "INVALID_ARGUMENT", ...
const char* StatusCodeName(grpc::StatusCode code);

}  // namespace attn::client
