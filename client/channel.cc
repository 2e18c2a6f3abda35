#include "client/channel.h"

#include <grpcpp/support/client_interceptor.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "util/files.h"

namespace attn::client {
namespace {

using grpc::experimental::ClientInterceptorFactoryInterface;
using grpc::experimental::ClientRpcInfo;
using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::Interceptor;
using grpc::experimental::InterceptorBatchMethods;

// Adds the API key to every call's metadata.
class ApiKeyInterceptor : public Interceptor {
 public:
  explicit ApiKeyInterceptor(std::string header) : header_(std::move(header)) {}
  void Intercept(InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", header_});
    }
    methods->Proceed();
  }

 private:
  const std::string header_;
};

class ApiKeyInterceptorFactory : public ClientInterceptorFactoryInterface {
 public:
  explicit ApiKeyInterceptorFactory(std::string header) : header_(std::move(header)) {}
  Interceptor* CreateClientInterceptor(ClientRpcInfo* /*info*/) override {
    return new ApiKeyInterceptor(header_);
  }

 private:
  const std::string header_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& address,
                                                           const ChannelSecurity& security,
                                                           grpc::ChannelArguments arguments) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (security.tls || !security.tls_ca.empty() || !security.tls_cert.empty() ||
      !security.tls_key.empty()) {
    if (security.tls_cert.empty() != security.tls_key.empty()) {
      return absl::InvalidArgumentError(
          "--tls_cert and --tls_key: a client certificate needs both");
    }
    grpc::SslCredentialsOptions ssl;
    const std::pair<const char*, std::pair<const std::string*, std::string*>> files[] = {
        {"tls_ca", {&security.tls_ca, &ssl.pem_root_certs}},
        {"tls_cert", {&security.tls_cert, &ssl.pem_cert_chain}},
        {"tls_key", {&security.tls_key, &ssl.pem_private_key}}};
    for (const auto& [flag, paths] : files) {
      if (paths.first->empty()) continue;
      absl::StatusOr<std::string> contents =
          ReadFileBytes(*paths.first, absl::StrCat("--", flag, "="));
      if (!contents.ok()) return contents.status();
      *paths.second = *std::move(contents);
    }
    credentials = grpc::SslCredentials(ssl);
    if (!security.tls_server_name.empty()) {
      arguments.SetSslTargetNameOverride(security.tls_server_name);
    }
  }
  if (security.api_key.empty()) {
    return grpc::CreateCustomChannel(address, credentials, arguments);
  }
  std::vector<std::unique_ptr<ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(
      std::make_unique<ApiKeyInterceptorFactory>(absl::StrCat("Bearer ", security.api_key)));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, arguments,
                                                                 std::move(interceptors));
}

}  // namespace attn::client
