// How attnctl reaches a server: plaintext or TLS (with a client certificate
// for mutual TLS), and an API key sent with every call.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace attn::client {

struct ChannelSecurity {
  bool tls = false;      // TLS; implied by any of the files below
  std::string tls_ca;    // PEM roots that signed the server's certificate; empty: system roots
  std::string tls_cert;  // PEM client certificate (mutual TLS)
  std::string tls_key;   // its PEM private key
  std::string tls_server_name;  // the name to check in the server's certificate; empty: the host
  std::string api_key;          // sent as "authorization: Bearer <key>"; empty: none
};

// A channel to `address`; kInvalidArgument naming the flag when a file
// cannot be read or only one of the certificate and key is given.
absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& address,
                                                           const ChannelSecurity& security,
                                                           grpc::ChannelArguments arguments);

}  // namespace attn::client
