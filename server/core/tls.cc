#include "server/core/tls.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"

namespace attn::serving {
namespace {

struct BioCloser {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Closer {
  void operator()(X509* x509) const { X509_free(x509); }
};
struct KeyCloser {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using Bio = std::unique_ptr<BIO, BioCloser>;
using Certificate = std::unique_ptr<X509, X509Closer>;
using PrivateKey = std::unique_ptr<EVP_PKEY, KeyCloser>;

absl::Status Bad(const char* flag, const std::string& path, const std::string& what) {
  ERR_clear_error();
  return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", path, ": ", what));
}

absl::StatusOr<Bio> Open(const char* flag, const std::string& path) {
  Bio bio(BIO_new_file(path.c_str(), "r"));
  if (!bio) return Bad(flag, path, "cannot read it");
  return bio;
}

absl::StatusOr<Certificate> FirstCertificate(const char* flag, const std::string& path) {
  absl::StatusOr<Bio> bio = Open(flag, path);
  if (!bio.ok()) return bio.status();
  Certificate certificate(PEM_read_bio_X509(bio->get(), nullptr, nullptr, nullptr));
  if (!certificate) return Bad(flag, path, "holds no PEM certificate");
  return certificate;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TlsServerCredentialsFor(
    const TlsOptions& options) {
  if (options.cert.empty() || options.key.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key: TLS needs both (and --tls_client_ca for mutual TLS)");
  }
  if (options.reload_seconds < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_reload_seconds: must be at least 1, got ", options.reload_seconds));
  }
  absl::StatusOr<Certificate> certificate = FirstCertificate("tls_cert", options.cert);
  if (!certificate.ok()) return certificate.status();
  absl::StatusOr<Bio> key_bio = Open("tls_key", options.key);
  if (!key_bio.ok()) return key_bio.status();
  PrivateKey key(PEM_read_bio_PrivateKey(key_bio->get(), nullptr, nullptr, nullptr));
  if (!key) return Bad("tls_key", options.key, "holds no PEM private key (or it is encrypted)");
  if (X509_check_private_key(certificate->get(), key.get()) != 1) {
    return Bad("tls_key", options.key, absl::StrCat("is not the key of --tls_cert=", options.cert));
  }
  if (!options.client_ca.empty()) {
    absl::StatusOr<Certificate> ca = FirstCertificate("tls_client_ca", options.client_ca);
    if (!ca.ok()) return ca.status();
  }
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      options.key, options.cert, options.client_ca, options.reload_seconds);
  grpc::experimental::TlsServerCredentialsOptions tls(provider);
  tls.watch_identity_key_cert_pairs();
  if (options.client_ca.empty()) {
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    tls.watch_root_certs();
    tls.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(tls);
}

}  // namespace attn::serving
