// State over gRPC: GenerateRequest.return_state and .state between two real
// servers on 127.0.0.1, the errors for states that do not belong, and the
// state cache's usage fields and metrics.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/backend/backend.h"
#include "server/metrics/metrics.h"
#include "server/server.h"
#include "server/state/state_blob.h"
#include "tests/server/requests.h"
#include "tests/server/test_server.h"
#include "tests/test_util.h"
#include "tests/tiny_model.h"

namespace attn::serving {
namespace state_service_test {

using attn::v1::GenerateRequest;
using attn::v1::GenerateResponse;

std::unique_ptr<InferenceServer> Serve(const std::string& dir, EngineOptions engine = {}) {
  return testing::StartTestServer(dir, engine);
}

class Client {
 public:
  explicit Client(const InferenceServer& server)
      : stub_(attn::v1::TextGeneration::NewStub(grpc::CreateChannel(
            absl::StrCat("127.0.0.1:", server.port()), grpc::InsecureChannelCredentials()))) {}
  grpc::Status Generate(const GenerateRequest& request, GenerateResponse* response) {
    grpc::ClientContext context;
    return stub_->Generate(&context, request, response);
  }
  grpc::Status Stream(const GenerateRequest& request, GenerateResponse* merged) {
    return testing::StreamMerged(*stub_, request, merged);
  }

 private:
  std::unique_ptr<attn::v1::TextGeneration::Stub> stub_;
};

GenerateRequest Greedy(const std::string& model, std::vector<int64_t> ids, int max_tokens) {
  GenerateRequest r = testing::GreedyRequest(model, "", max_tokens);
  r.clear_prompt();
  for (int64_t id : ids) r.add_prompt_token_ids(id);
  return r;
}

std::vector<int64_t> Ids(int64_t length, int64_t offset) {
  return testing::SyntheticIds(length, offset);
}

class StateServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new attn::testing::ScopedTempDir("state_service_test");
    other_dir_ = new attn::testing::ScopedTempDir("state_service_test_other");
    const std::string dir = dir_->path().string();
    attn::testing::WriteTinyPackage(dir, "tiny-aft", MixerKind::kAftConv);
    attn::testing::WriteTinyPackage(dir, "tiny-linear", MixerKind::kLinearDecay);
    attn::testing::WriteTinyPackage(dir, "tiny-mha", MixerKind::kMhaAlibi);
    // Same name and kind, other weights: another version of tiny-aft.
    attn::testing::WriteTinyPackage(other_dir_->path().string(), "tiny-aft", MixerKind::kAftConv,
                                    /*seed=*/8);
    first_ = Serve(dir).release();
    second_ = Serve(dir).release();
    other_ = Serve(other_dir_->path().string()).release();
  }
  static void TearDownTestSuite() {
    delete first_;
    delete second_;
    delete other_;
    delete dir_;
    delete other_dir_;
  }
  void SetUp() override {
    ASSERT_NE(first_, nullptr);
    ASSERT_NE(second_, nullptr);
    ASSERT_NE(other_, nullptr);
  }

  static attn::testing::ScopedTempDir* dir_;
  static attn::testing::ScopedTempDir* other_dir_;
  static InferenceServer* first_;
  static InferenceServer* second_;
  static InferenceServer* other_;
};

attn::testing::ScopedTempDir* StateServiceTest::dir_ = nullptr;
attn::testing::ScopedTempDir* StateServiceTest::other_dir_ = nullptr;
InferenceServer* StateServiceTest::first_ = nullptr;
InferenceServer* StateServiceTest::second_ = nullptr;
InferenceServer* StateServiceTest::other_ = nullptr;

TEST_F(StateServiceTest, AStateResumesOnAnotherServerAsIfUninterrupted) {
  for (const std::string model : {"tiny-aft", "tiny-linear", "tiny-mha"}) {
    Client first(*first_), second(*second_);
    GenerateRequest turn1 = Greedy(model, Ids(17, 0), 12);
    turn1.set_return_state(true);
    GenerateResponse r1;
    ASSERT_TRUE(first.Stream(turn1, &r1).ok()) << model;
    ASSERT_FALSE(r1.state().empty()) << model;
    ASSERT_EQ(r1.state_tokens(), 29) << model;
    ASSERT_EQ(r1.state_token_ids_size(), 29) << model;

    GenerateRequest turn2 = Greedy(model, Ids(5, 90), 12);
    turn2.set_state(r1.state());
    GenerateResponse resumed;
    ASSERT_TRUE(second.Generate(turn2, &resumed).ok()) << model;
    EXPECT_EQ(resumed.usage().cached_tokens(), 29) << model;
    EXPECT_EQ(resumed.usage().prefilled_tokens(), 5) << model;

    std::vector<int64_t> whole(r1.state_token_ids().begin(), r1.state_token_ids().end());
    const std::vector<int64_t> more = Ids(5, 90);
    whole.insert(whole.end(), more.begin(), more.end());
    GenerateResponse uninterrupted;
    ASSERT_TRUE(first.Generate(Greedy(model, whole, 12), &uninterrupted).ok()) << model;
    EXPECT_EQ(
        std::vector<int64_t>(resumed.token_ids().begin(), resumed.token_ids().end()),
        std::vector<int64_t>(uninterrupted.token_ids().begin(), uninterrupted.token_ids().end()))
        << model;
    ASSERT_EQ(resumed.logprobs_size(), uninterrupted.logprobs_size());
    for (int i = 0; i < resumed.logprobs_size(); ++i) {
      EXPECT_NEAR(resumed.logprobs(i), uninterrupted.logprobs(i), 1e-4) << model << " " << i;
    }
  }
}

TEST_F(StateServiceTest, StatesThatDoNotBelongAreRefusedByName) {
  Client first(*first_), other(*other_);
  GenerateRequest ask = Greedy("tiny-aft", Ids(6, 3), 3);
  ask.set_return_state(true);
  GenerateResponse with_state;
  ASSERT_TRUE(first.Generate(ask, &with_state).ok());
  const std::string state = with_state.state();
  ASSERT_GT(state.size(), 64u);

  auto refused = [&](Client& client, const std::string& model, const std::string& bytes) {
    GenerateRequest request = Greedy(model, Ids(3, 1), 2);
    request.set_state(bytes);
    GenerateResponse response;
    return client.Generate(request, &response);
  };
  // Truncated anywhere, or one byte changed: INVALID_ARGUMENT naming state.
  for (size_t keep : {size_t{0}, size_t{3}, size_t{20}, state.size() / 2, state.size() - 1}) {
    grpc::Status status = refused(first, "tiny-aft", state.substr(0, keep));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << keep;
    EXPECT_TRUE(absl::StartsWith(status.error_message(), "state:")) << status.error_message();
  }
  std::string flipped = state;
  flipped[flipped.size() / 2] ^= 0x40;
  EXPECT_EQ(refused(first, "tiny-aft", flipped).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Another model, another version of the same one: both fingerprints named.
  grpc::Status wrong_model = refused(first, "tiny-linear", state);
  EXPECT_EQ(wrong_model.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(wrong_model.error_message(), "aft-conv-"))
      << wrong_model.error_message();
  EXPECT_TRUE(absl::StrContains(wrong_model.error_message(), "linear-decay-"));
  grpc::Status wrong_version = refused(other, "tiny-aft", state);
  EXPECT_EQ(wrong_version.error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  // Nothing else was disturbed: the same state still works.
  EXPECT_TRUE(refused(first, "tiny-aft", state).ok());
}

TEST_F(StateServiceTest, AStateOverMaxStateBytesIsRefused) {
  EngineOptions small;
  small.max_active = 2;
  small.max_state_bytes = 1000;  // less than one tiny-aft state
  auto server = Serve(dir_->path().string(), small);
  ASSERT_NE(server, nullptr);
  Client first(*first_), limited(*server);
  GenerateRequest ask = Greedy("tiny-aft", Ids(6, 3), 3);
  ask.set_return_state(true);
  GenerateResponse with_state;
  ASSERT_TRUE(first.Generate(ask, &with_state).ok());
  GenerateRequest request = Greedy("tiny-aft", Ids(3, 1), 2);
  request.set_state(with_state.state());
  GenerateResponse response;
  grpc::Status status = limited.Generate(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "--max_state_bytes"))
      << status.error_message();
}

TEST_F(StateServiceTest, TheCacheShowsInUsageListModelsAndMetrics) {
  Client first(*first_);
  const GenerateRequest request = Greedy("tiny-aft", Ids(40, 11), 4);
  GenerateResponse cold, warm;
  ASSERT_TRUE(first.Generate(request, &cold).ok());
  ASSERT_TRUE(first.Generate(request, &warm).ok());
  EXPECT_EQ(cold.usage().cached_tokens(), 0);
  EXPECT_EQ(cold.usage().prefilled_tokens(), 40);
  EXPECT_EQ(warm.usage().cached_tokens(), 40);
  EXPECT_EQ(warm.usage().prefilled_tokens(), 0);
  EXPECT_EQ(std::vector<int64_t>(warm.token_ids().begin(), warm.token_ids().end()),
            std::vector<int64_t>(cold.token_ids().begin(), cold.token_ids().end()));

  // On by default for the recurrent kinds, off for a key/value cache.
  auto stub = attn::v1::TextGeneration::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", first_->port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  attn::v1::ListModelsResponse models;
  ASSERT_TRUE(stub->ListModels(&context, {}, &models).ok());
  for (const auto& info : models.models()) {
    EXPECT_EQ(info.state_cache_bytes() > 0, info.mixer() != "mha-alibi") << info.name();
    EXPECT_TRUE(absl::StartsWith(info.state_fingerprint(), info.mixer() + "-"));
  }

  const std::string metrics = first_->metrics().Exposition();
  EXPECT_TRUE(absl::StrContains(metrics, "attn_state_cache_hits_total{model=\"tiny-aft\"}"))
      << metrics;
  EXPECT_TRUE(
      absl::StrContains(metrics, "attn_state_cache_tokens_saved_total{model=\"tiny-aft\"}"));
  EXPECT_TRUE(absl::StrContains(metrics, "attn_state_cache_capacity_bytes{model=\"tiny-mha\"} 0"));
}

TEST(StateBlobTest, RoundTripsAndRejectsEveryTruncation) {
  auto row = std::make_shared<SavedRow>();
  row->tensors = {torch::tensor({int64_t{7}}), torch::randn({2, 3}), torch::zeros({1, 4, 0, 2})};
  const std::string bytes = EncodeStateBlob({"aft-conv-0123456789abcdef", 7, row});
  absl::StatusOr<StateBlob> back = DecodeStateBlob(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->fingerprint, "aft-conv-0123456789abcdef");
  EXPECT_EQ(back->tokens, 7);
  ASSERT_EQ(back->row->tensors.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(back->row->tensors[i], row->tensors[i]));
  for (size_t keep = 0; keep < bytes.size(); ++keep) {
    absl::StatusOr<StateBlob> cut = DecodeStateBlob(absl::string_view(bytes).substr(0, keep));
    EXPECT_EQ(cut.status().code(), absl::StatusCode::kInvalidArgument) << keep;
  }
  std::string newer = bytes;
  newer[4] = 2;  // the version
  EXPECT_EQ(DecodeStateBlob(newer).status().code(), absl::StatusCode::kFailedPrecondition);
}

// A model's fingerprint is its mixer and Hash64 of its file (which its
// loader hashes as it reads it). The hash is pinned: replicas of other
// versions share states by it, and stored states carry it as a checksum.
TEST(StateBlobTest, FingerprintIsTheMixerAndAPinnedHash) {
  EXPECT_EQ(absl::StrFormat("%016x", Hash64("attention-free model 0123")), "71f23e378cb1dc6c");
  std::string bytes((size_t{1} << 20) + 13, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
  const uint64_t h = Hash64(bytes);
  EXPECT_EQ(ModelFingerprint("mamba2", h), absl::StrFormat("mamba2-%016x", h));
  EXPECT_NE(Hash64(""), Hash64(std::string(1, '\0'))) << "the length is hashed";
  EXPECT_NE(Hash64(bytes, /*seed=*/1), h);
  bytes.back() ^= 1;
  EXPECT_NE(Hash64(bytes), h) << "the tail bytes count";
}

}  // namespace state_service_test
}  // namespace attn::serving
