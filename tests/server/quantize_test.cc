// --quantize end to end: a real server on 127.0.0.1 hosting tiny models
// with int8 and bf16 weights beside a float32 one, over gRPC.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/kernels/bf16_gemm.h"
#include "model/lm/model_package.h"
#include "server/core/model_registry.h"
#include "server/metrics/metrics.h"
#include "server/server.h"
#include "tests/server/requests.h"
#include "tests/server/test_server.h"
#include "tests/test_util.h"
#include "tests/tiny_model.h"

namespace attn::serving {
namespace {

using attn::v1::GenerateRequest;
using attn::v1::GenerateResponse;

absl::StatusOr<std::unique_ptr<InferenceServer>> StartQuantized(const std::string& dir,
                                                                const std::string& quantize) {
  ServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.http_port = 0;
  options.metrics_port = 0;
  options.registry.paths = {dir};
  options.registry.default_model = "tiny-aft";
  options.shutdown_grace = absl::Seconds(10);
  if (absl::Status parsed = ParseQuantizeFlag(quantize, &options.registry); !parsed.ok()) {
    return parsed;
  }
  return InferenceServer::Start(options);
}

// An int8 package (attn-export --quantize=int8) of the model tiny-aft.pt holds.
void WriteInt8Package(const std::string& dir, const std::string& name) {
  CausalLm model = attn::testing::TinyModel(MixerKind::kAftConv);
  ASSERT_TRUE(QuantizeInt8(model).ok());
  ASSERT_TRUE(
      SavePackage(dir + "/" + name + ".pt", model, attn::testing::TinyTokenizer().Serialized())
          .ok());
}

class QuantizeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new attn::testing::ScopedTempDir("quantize_test");
    attn::testing::WriteTinyPackage(dir_->path().string(), "tiny-aft", MixerKind::kAftConv);
    attn::testing::WriteTinyPackage(dir_->path().string(), "tiny-linear", MixerKind::kLinearElu);
    attn::testing::WriteTinyPackage(dir_->path().string(), "tiny-aft-bf16", MixerKind::kAftConv);
    WriteInt8Package(dir_->path().string(), "tiny-aft-int8");
    // The int8 package stays int8 whatever --quantize asks.
    auto server = StartQuantized(dir_->path().string(),
                                 "none,tiny-aft=int8,tiny-aft-bf16=bf16,tiny-aft-int8=bf16");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    stub_ = attn::v1::TextGeneration::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials()));
  }

  static attn::testing::ScopedTempDir* dir_;
  static InferenceServer* server_;
  std::unique_ptr<attn::v1::TextGeneration::Stub> stub_;
};

attn::testing::ScopedTempDir* QuantizeTest::dir_ = nullptr;
InferenceServer* QuantizeTest::server_ = nullptr;

TEST_F(QuantizeTest, ListModelsAndMetricsSayTheWeightType) {
  grpc::ClientContext context;
  attn::v1::ListModelsResponse response;
  ASSERT_TRUE(stub_->ListModels(&context, {}, &response).ok());
  ASSERT_EQ(response.models_size(), 4);
  int64_t float_bytes = 0, int8_bytes = 0, bf16_bytes = 0, float_params = 0, int8_params = 0;
  for (const auto& m : response.models()) {
    if (m.name() == "tiny-aft-bf16") {
      EXPECT_EQ(m.weight_dtype(), "bf16");
      bf16_bytes = m.weight_bytes();
      continue;
    }
    // tiny-aft-int8 is an int8 package, served as int8 under "none".
    const bool int8 = m.name() != "tiny-linear";
    if (m.name() == "tiny-aft-int8") {
      EXPECT_EQ(m.weight_dtype(), "int8");
      continue;
    }
    EXPECT_EQ(m.weight_dtype(), int8 ? "int8" : "float32") << m.name();
    (int8 ? int8_bytes : float_bytes) = m.weight_bytes();
    (int8 ? int8_params : float_params) = m.parameters();
  }
  // Both tiny models have the same dense shapes: int8 is a quarter of the
  // bytes, plus a float scale per output channel.
  EXPECT_GT(float_bytes, 0);
  EXPECT_LT(int8_bytes, float_bytes / 3);
  EXPECT_GT(int8_bytes, float_bytes / 4);
  EXPECT_EQ(bf16_bytes, float_bytes / 2);  // two bytes a weight, no scales
  const std::string metrics = server_->metrics().Exposition();
  EXPECT_TRUE(absl::StrContains(metrics, "weight_dtype=\"int8\"")) << metrics;
  EXPECT_TRUE(absl::StrContains(metrics, "weight_dtype=\"float32\""));
  EXPECT_TRUE(absl::StrContains(metrics, "weight_dtype=\"bf16\""));
}

// Greedy tokens streamed from `model` (one row per step) against Score of
// the prompt and those tokens (about 90 rows in one product): their
// logprobs agree as the float model's do.
void ExpectStreamLogprobsEqualScore(attn::v1::TextGeneration::Stub& stub, const std::string& model,
                                    double tolerance = 1e-4) {
  const std::vector<int64_t> prompt = attn::testing::TinyTokenizer().Encode("light falls over");
  GenerateRequest request = testing::GreedyRequest(model, "", 84);
  request.clear_prompt();
  for (int64_t id : prompt) request.add_prompt_token_ids(id);
  GenerateResponse streamed;
  ASSERT_TRUE(testing::StreamMerged(stub, request, &streamed).ok());
  ASSERT_EQ(streamed.logprobs_size(), 84);
  attn::v1::ScoreRequest score_request;
  score_request.set_model(model);
  for (int64_t id : prompt) score_request.add_token_ids(id);
  for (int64_t id : streamed.token_ids()) score_request.add_token_ids(id);
  ASSERT_GT(score_request.token_ids_size(), 32);  // past 32 rows
  grpc::ClientContext context;
  attn::v1::ScoreResponse scored;
  ASSERT_TRUE(stub.Score(&context, score_request, &scored).ok());
  for (int i = 0; i < 84; ++i) {
    EXPECT_NEAR(streamed.logprobs(i), scored.logprobs(static_cast<int>(prompt.size()) + i),
                tolerance)
        << model << " token " << i;
  }
}

// The int8 copies multiply activations rounded per row, alike in both.
TEST_F(QuantizeTest, GreedyStreamLogprobsEqualScoreWithInt8Weights) {
  ExpectStreamLogprobsEqualScore(*stub_, "tiny-aft");
}

// Both multiply the bf16 weights by activations rounded to bf16, each row
// alike where the bf16 product runs at every row count (AVX-512). On AVX2
// the score's rows take the float product in another order of sums, and
// where that moves an activation across a bf16 rounding boundary, the
// logprobs move by that step's effect (a few 1e-3 at most).
TEST_F(QuantizeTest, GreedyStreamLogprobsEqualScoreWithBf16Weights) {
  ExpectStreamLogprobsEqualScore(*stub_, "tiny-aft-bf16",
                                 kernels::Bf16GemmRunsEveryRowCount() ? 1e-4 : 1e-2);
}

// The int8 package serves what --quantize=int8 serves from the float
// package: the same int8 weights, so the same tokens and logprobs.
TEST_F(QuantizeTest, AnInt8PackageServesWhatQuantizingAtLoadServes) {
  GenerateResponse from_flag, from_package;
  ASSERT_TRUE(
      testing::StreamMerged(*stub_, testing::GreedyRequest("tiny-aft", "the light", 40), &from_flag)
          .ok());
  ASSERT_TRUE(testing::StreamMerged(
                  *stub_, testing::GreedyRequest("tiny-aft-int8", "the light", 40), &from_package)
                  .ok());
  ASSERT_EQ(from_package.token_ids_size(), 40);
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(from_package.token_ids(i), from_flag.token_ids(i)) << i;
    EXPECT_NEAR(from_package.logprobs(i), from_flag.logprobs(i), 1e-6) << i;
  }
  grpc::ClientContext context;
  attn::v1::ListModelsResponse models;
  ASSERT_TRUE(stub_->ListModels(&context, {}, &models).ok());
  int64_t flag_bytes = -1, package_bytes = -2;
  for (const auto& m : models.models()) {
    if (m.name() == "tiny-aft") flag_bytes = m.weight_bytes();
    if (m.name() == "tiny-aft-int8") package_bytes = m.weight_bytes();
  }
  EXPECT_EQ(package_bytes, flag_bytes);
}

TEST(QuantizeFlag, BadValuesAndUnknownModelsAreNamed) {
  RegistryOptions options;
  absl::Status bad = ParseQuantizeFlag("int4", &options);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.message(), "--quantize: \"int4\" is not none, int8 or bf16"))
      << bad;
  ASSERT_TRUE(ParseQuantizeFlag("int8,big=none,small=bf16", &options).ok());
  EXPECT_EQ(options.quantization, RegistryOptions::Quantization::kInt8);
  EXPECT_EQ(options.model_quantization.at("big"), RegistryOptions::Quantization::kNone);
  EXPECT_EQ(options.model_quantization.at("small"), RegistryOptions::Quantization::kBf16);

  attn::testing::ScopedTempDir dir("quantize_flag");
  attn::testing::WriteTinyPackage(dir.path().string(), "tiny-aft", MixerKind::kAftConv);
  auto server = StartQuantized(dir.path().string(), "tiny-aft=int8,absent=int8");
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StrContains(server.status().message(), "--quantize: absent=int8 names no model"))
      << server.status();
}

}  // namespace
}  // namespace attn::serving
