// TLS for the gRPC port: server certificates, and client certificates when
// a client CA is set (mutual TLS).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class ServerCredentials;
}  // namespace grpc

namespace attn::serving {

struct TlsOptions {
  std::string cert;       // PEM certificate chain (--tls_cert); empty: plaintext
  std::string key;        // PEM private key (--tls_key)
  std::string client_ca;  // PEM CA certificates (--tls_client_ca); set: mutual TLS
  // How often the three files are re-read: a renewed certificate is used
  // for new connections without a restart, and running streams go on.
  int reload_seconds = 60;

  bool enabled() const { return !cert.empty() || !key.empty() || !client_ca.empty(); }
};

// Checks that the files exist, parse, and that the key is the certificate's
// (kInvalidArgument naming the flag and what is wrong), then returns
// credentials that watch the files. With a client CA, a client must present
// a certificate that CA signed, or its handshake fails.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TlsServerCredentialsFor(
    const TlsOptions& options);

}  // namespace attn::serving
