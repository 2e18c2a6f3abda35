// Access to a real server: API keys (server/core/access.h) alone and over the
// wire, TLS and mutual TLS with certificates openssl makes at test time
// (tests/server/make_test_certs.sh), and the metrics endpoint's defences
// against slow, oversized and odd requests.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/core/access.h"
#include "server/metrics/metrics.h"
#include "server/server.h"
#include "tests/server/requests.h"
#include "tests/test_util.h"
#include "tests/tiny_model.h"

namespace attn::serving {
namespace secure_server_test {

using attn::v1::GenerateRequest;
using attn::v1::GenerateResponse;

// --- API keys alone ---

TEST(AccessTest, KeysAndTheirDigestsAdmitAndNothingElseDoes) {
  const std::string digest = "sha256:" + [] {
    const Access::Digest d = Access::Sha256("second-key");
    std::string hex;
    for (uint8_t byte : d) absl::StrAppend(&hex, absl::Hex(byte, absl::kZeroPad2));
    return hex;
  }();
  auto access = Access::FromKeys("# team keys\nfirst-key\n\n  " + digest + "  \n", 0);
  ASSERT_TRUE(access.ok()) << access.status();
  EXPECT_TRUE((*access)->Authenticate("Bearer first-key").ok());
  EXPECT_TRUE((*access)->Authenticate("Bearer second-key").ok());
  for (const char* wrong : {"", "first-key", "Bearer ", "Bearer first-key ", "Bearer FIRST-KEY",
                            "Basic Zmlyc3Qta2V5"}) {
    absl::Status status = (*access)->Authenticate(wrong);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << wrong;
    EXPECT_FALSE(absl::StrContains(status.message(), "first-key")) << status;
  }
  EXPECT_FALSE((*access)->Authenticate("Bearer " + digest).ok());  // the digest is no key
  // Without keys, everyone.
  EXPECT_TRUE(Access().Authenticate("").ok());
}

TEST(AccessTest, MalformedFilesNameTheLineNotTheKey) {
  auto bad = Access::FromKeys("fine-key\nsha256:abc\n", 0);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "line 2")) << bad.status();
  EXPECT_FALSE(absl::StrContains(bad.status().message(), "fine-key"));
  EXPECT_EQ(Access::FromKeys("# nothing\n\n", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Access::FromFile("/nonexistent/keys", 0).status().code(), absl::StatusCode::kNotFound);
}

TEST(AccessTest, EachKeyHasItsOwnLimitAndTicketsGiveItBack) {
  auto access = Access::FromKeys("alpha\nbeta\n", 2);
  ASSERT_TRUE(access.ok());
  auto a1 = (*access)->Admit("Bearer alpha");
  auto a2 = (*access)->Admit("Bearer alpha");
  ASSERT_TRUE(a1.ok() && a2.ok());
  auto a3 = (*access)->Admit("Bearer alpha");
  EXPECT_EQ(a3.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(a3.status().message(), "--max_requests_per_key"));
  EXPECT_TRUE((*access)->Admit("Bearer beta").ok());  // another tenant is not affected
  { Access::Ticket done = *std::move(a1); }
  EXPECT_EQ((*access)->running(0), 1);
  EXPECT_TRUE((*access)->Admit("Bearer alpha").ok());
}

// --- Over the wire ---

std::string Read(const std::string& path) {
  std::ifstream file(path);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

class SecureServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new attn::testing::ScopedTempDir("secure_server_test");
    const std::string dir = dir_->path().string();
    attn::testing::WriteTinyPackage(dir, "tiny-aft", MixerKind::kAftConv);
    const std::string certs = dir + "/certs";
    ASSERT_EQ(
        std::system(
            absl::StrCat(ATTN_SOURCE_DIR, "/tests/server/make_test_certs.sh ", certs).c_str()),
        0);
    std::ofstream(dir + "/keys") << "team-a-key\nteam-b-key\n";
    ServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.http_port = 0;
    options.metrics_port = 0;
    options.registry.paths = {dir + "/tiny-aft.pt"};
    options.registry.default_model = "tiny-aft";
    options.tls.cert = certs + "/server.pem";
    options.tls.key = certs + "/server.key";
    options.tls.client_ca = certs + "/ca.pem";
    options.api_keys_file = dir + "/keys";
    options.max_requests_per_key = 1;
    options.shutdown_grace = absl::Seconds(5);
    auto server = InferenceServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  void SetUp() override { ASSERT_NE(server_, nullptr); }

  static std::string Cert(const std::string& name) {
    return dir_->path().string() + "/certs/" + name;
  }
  // A stub over TLS that trusts our CA, with the named client certificate
  // (empty: none).
  static std::unique_ptr<attn::v1::TextGeneration::Stub> Stub(const std::string& client) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = Read(Cert("ca.pem"));
    if (!client.empty()) {
      ssl.pem_cert_chain = Read(Cert(client + ".pem"));
      ssl.pem_private_key = Read(Cert(client + ".key"));
    }
    return attn::v1::TextGeneration::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_->port()), grpc::SslCredentials(ssl)));
  }
  // A short generation with API key `key` (empty: none).
  static grpc::Status Generate(attn::v1::TextGeneration::Stub& stub, const std::string& key,
                               GenerateResponse* response = nullptr) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    if (!key.empty()) context.AddMetadata("authorization", "Bearer " + key);
    GenerateResponse ignored;
    return stub.Generate(&context, testing::GreedyRequest("tiny-aft", "hello", 3),
                         response ? response : &ignored);
  }

  static attn::testing::ScopedTempDir* dir_;
  static InferenceServer* server_;
};

attn::testing::ScopedTempDir* SecureServerTest::dir_ = nullptr;
InferenceServer* SecureServerTest::server_ = nullptr;

TEST_F(SecureServerTest, OnlyTheRightCertificateAndKeyGetIn) {
  // Plaintext to a TLS port: no connection.
  auto plain = attn::v1::TextGeneration::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials()));
  EXPECT_EQ(Generate(*plain, "team-a-key").error_code(), grpc::StatusCode::UNAVAILABLE);
  // TLS without a client certificate, or with one another CA signed.
  EXPECT_EQ(Generate(*Stub(""), "team-a-key").error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Generate(*Stub("other-client"), "team-a-key").error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // The right certificate, without a key or with a wrong one.
  grpc::Status no_key = Generate(*Stub("client"), "");
  EXPECT_EQ(no_key.error_code(), grpc::StatusCode::UNAUTHENTICATED) << no_key.error_message();
  grpc::Status wrong = Generate(*Stub("client"), "team-c-key");
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_FALSE(absl::StrContains(wrong.error_message(), "team-c-key"));
  // Both right: it generates.
  GenerateResponse response;
  EXPECT_TRUE(Generate(*Stub("client"), "team-a-key", &response).ok());
  EXPECT_EQ(response.token_ids_size(), 3);

  // Rejected calls are counted by code, and no key appears in the metrics.
  const std::string metrics = server_->metrics().Exposition();
  EXPECT_TRUE(absl::StrContains(metrics, "code=\"UNAUTHENTICATED\"")) << metrics;
  EXPECT_FALSE(absl::StrContains(metrics, "team-"));
}

TEST_F(SecureServerTest, HealthStaysOpenWithoutAKey) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = Read(Cert("ca.pem"));
  ssl.pem_cert_chain = Read(Cert("client.pem"));
  ssl.pem_private_key = Read(Cert("client.key"));
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()), grpc::SslCredentials(ssl)));
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(health->Check(&context, request, &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(SecureServerTest, AKeyAtItsLimitIsRefusedWhileAnotherKeyRuns) {
  auto stub = Stub("client");
  // A long stream holds team-a's one running call.
  grpc::ClientContext long_call;
  long_call.AddMetadata("authorization", "Bearer team-a-key");
  GenerateRequest long_request = testing::GreedyRequest("tiny-aft", "hello", 4000);
  auto reader = stub->GenerateStream(&long_call, long_request);
  GenerateResponse first;
  ASSERT_TRUE(reader->Read(&first));  // it is running
  grpc::Status refused = Generate(*stub, "team-a-key");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "--max_requests_per_key"));
  EXPECT_TRUE(Generate(*stub, "team-b-key").ok());  // another tenant still gets in
  long_call.TryCancel();
  while (reader->Read(&first)) {
  }
  reader->Finish().IgnoreError();
  // The client's cancel is local; the server frees the stream's slot once
  // it hears of it, and the call's ticket went back before that.
  ASSERT_TRUE(server_->registry()
                  .Find("tiny-aft")
                  .value()
                  ->engine->AwaitLoad([](const EngineLoad& l) { return l.running == 0; },
                                      absl::Now() + absl::Seconds(5)));
  grpc::Status again = Generate(*stub, "team-a-key");
  EXPECT_TRUE(again.ok()) << again.error_message();
}

TEST(SecureServerStartTest, BadCertificatesAreStartupErrorsNamingTheFlag) {
  attn::testing::ScopedTempDir dir("secure_server_start");
  const std::string certs = dir.path().string() + "/certs";
  ASSERT_EQ(std::system(
                absl::StrCat(ATTN_SOURCE_DIR, "/tests/server/make_test_certs.sh ", certs).c_str()),
            0);
  struct Case {
    std::string cert, key, ca, flag;
  } cases[] = {
      {certs + "/server.pem", certs + "/client.key", "", "--tls_key"},  // not the cert's key
      {certs + "/nope.pem", certs + "/server.key", "", "--tls_cert"},
      {certs + "/server.pem", certs + "/server.key", certs + "/server.key", "--tls_client_ca"},
      {certs + "/server.pem", "", "", "--tls_cert and --tls_key"},
  };
  for (const Case& c : cases) {
    ServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.http_port = 0;
    options.metrics_port = -1;
    options.registry.paths = {"/nonexistent"};  // never reached
    options.tls.cert = c.cert;
    options.tls.key = c.key;
    options.tls.client_ca = c.ca;
    auto server = InferenceServer::Start(options);
    ASSERT_FALSE(server.ok());
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << server.status();
    EXPECT_TRUE(absl::StrContains(server.status().message(), c.flag)) << server.status();
  }
}

}  // namespace secure_server_test
}  // namespace attn::serving
