// The gRPC service in process: a real server on 127.0.0.1 (any free port)
// hosting tiny models, real channels and stubs.
#include "server/grpc/service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <iterator>
#include <regex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "model/text/chat_format.h"
#include "nlohmann/json.hpp"
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
using grpc::health::v1::HealthCheckResponse;

const char* const kModels[] = {"tiny-aft", "tiny-linear", "tiny-mha"};

// An engine load with `n` sequences running (Engine::AwaitLoad).
std::function<bool(const EngineLoad&)> Running(int64_t n) {
  return [n](const EngineLoad& load) { return load.running == n; };
}

std::unique_ptr<InferenceServer> StartServer(const std::string& dir, EngineOptions engine = {}) {
  return testing::StartTestServer(dir, engine);
}

class ServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new attn::testing::ScopedTempDir("service_test");
    attn::testing::WriteTinyPackage(dir_->path().string(), "tiny-aft", MixerKind::kAftConv);
    attn::testing::WriteTinyPackage(dir_->path().string(), "tiny-linear", MixerKind::kLinearElu);
    attn::testing::WriteTinyPackage(dir_->path().string(), "tiny-mha", MixerKind::kMha);
    server_ = StartServer(dir_->path().string()).release();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = attn::v1::TextGeneration::NewStub(channel_);
  }

  static GenerateRequest Greedy(const std::string& model, const std::string& prompt,
                                int max_tokens) {
    return testing::GreedyRequest(model, prompt, max_tokens);
  }
  // All messages of a stream merged, and its final status.
  grpc::Status Stream(const GenerateRequest& request, GenerateResponse* merged,
                      int* messages = nullptr) {
    return testing::StreamMerged(*stub_, request, merged, messages);
  }
  grpc::Status Unary(const GenerateRequest& request, GenerateResponse* response,
                     int deadline_ms = 0) {
    grpc::ClientContext context;
    if (deadline_ms > 0) {
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(deadline_ms));
    }
    return stub_->Generate(&context, request, response);
  }
  HealthCheckResponse::ServingStatus Health(const std::string& service) {
    auto health = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    HealthCheckResponse response;
    grpc::Status status = health->Check(&context, request, &response);
    return status.ok() ? response.status() : HealthCheckResponse::UNKNOWN;
  }
  static const Engine& EngineOf(const std::string& name) {
    return *server_->registry().Find(name).value()->engine;
  }

  static attn::testing::ScopedTempDir* dir_;
  static InferenceServer* server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<attn::v1::TextGeneration::Stub> stub_;
};

attn::testing::ScopedTempDir* ServiceTest::dir_ = nullptr;
InferenceServer* ServiceTest::server_ = nullptr;

TEST_F(ServiceTest, ListModelsDescribesEveryModel) {
  grpc::ClientContext context;
  attn::v1::ListModelsResponse response;
  ASSERT_TRUE(stub_->ListModels(&context, {}, &response).ok());
  ASSERT_EQ(response.models_size(), 3);
  for (const auto& m : response.models()) {
    EXPECT_EQ(m.is_default(), m.name() == "tiny-aft");
    EXPECT_GT(m.parameters(), 0);
    EXPECT_EQ(m.vocab_size(), attn::testing::TinyTokenizer().vocab_size());
    EXPECT_GT(m.state_bytes_per_sequence(), 0);
    EXPECT_EQ(m.device(), "cpu");
    EXPECT_EQ(m.max_context(), m.mixer() == "mha" ? 512 : 0) << m.name();
  }
}

TEST_F(ServiceTest, StreamingAndUnaryGreedyGiveTheSameText) {
  for (const char* model : kModels) {
    SCOPED_TRACE(model);
    const GenerateRequest request = Greedy(model, "the river keeps its", 24);
    GenerateResponse unary, streamed;
    ASSERT_TRUE(Unary(request, &unary).ok());
    int messages = 0;
    ASSERT_TRUE(Stream(request, &streamed, &messages).ok());
    EXPECT_GE(messages, 1);  // one per token unless tokens queued during a write
    EXPECT_LE(messages, 24);
    EXPECT_EQ(streamed.text(), unary.text());
    EXPECT_EQ(streamed.token_ids_size(), 24);
    EXPECT_TRUE(std::equal(streamed.token_ids().begin(), streamed.token_ids().end(),
                           unary.token_ids().begin()));
    EXPECT_EQ(unary.finish_reason(), attn::v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(unary.usage().completion_tokens(), 24);
    EXPECT_EQ(unary.model(), model);
  }
}

// A reader that pauses still gets every token once and in order, whether the
// server sent them one per message or merged the ones that queued while a
// write was in flight (RequestStream::PopReady; its own tests cover merging).
TEST_F(ServiceTest, APausingReaderGetsEveryTokenOnceInOrder) {
  const GenerateRequest request = Greedy("tiny-aft", "the river keeps its", 12);
  GenerateResponse unary;
  ASSERT_TRUE(Unary(request, &unary).ok());
  grpc::ClientContext context;
  auto reader = stub_->GenerateStream(&context, request);
  GenerateResponse message, merged;
  int messages = 0;
  while (reader->Read(&message)) {
    if (++messages == 1) {
      // The reader pauses until the engine has pushed every token: the rest
      // queue up (12 fit the stream's buffer), and reach it merged.
      ASSERT_TRUE(EngineOf("tiny-aft")
                      .AwaitLoad([](const EngineLoad& l) { return l.running == 0; },
                                 absl::Now() + absl::Seconds(10)));
    }
    merged.mutable_text()->append(message.text());
    merged.mutable_token_ids()->MergeFrom(message.token_ids());
    merged.mutable_logprobs()->MergeFrom(message.logprobs());
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_LE(messages, 12);
  EXPECT_EQ(merged.text(), unary.text());
  ASSERT_EQ(merged.token_ids_size(), 12);
  EXPECT_TRUE(
      std::equal(merged.token_ids().begin(), merged.token_ids().end(), unary.token_ids().begin()));
  EXPECT_EQ(merged.logprobs_size(), 12);
}

// The recurrent path (each streamed token's logprob from step()) equals the
// parallel path (Score) end to end.
TEST_F(ServiceTest, GreedyStreamLogprobsEqualScore) {
  for (const char* model : kModels) {
    SCOPED_TRACE(model);
    GenerateRequest request = Greedy(model, "", 40);
    request.clear_prompt();
    std::vector<int64_t> prompt = attn::testing::TinyTokenizer().Encode("light falls over stone");
    for (int64_t id : prompt) request.add_prompt_token_ids(id);
    GenerateResponse streamed;
    ASSERT_TRUE(Stream(request, &streamed).ok());
    ASSERT_EQ(streamed.logprobs_size(), 40);

    attn::v1::ScoreRequest score_request;
    score_request.set_model(model);
    for (int64_t id : prompt) score_request.add_token_ids(id);
    for (int64_t id : streamed.token_ids()) score_request.add_token_ids(id);
    grpc::ClientContext context;
    attn::v1::ScoreResponse scored;
    ASSERT_TRUE(stub_->Score(&context, score_request, &scored).ok());
    ASSERT_EQ(scored.logprobs_size(), static_cast<int>(prompt.size()) + 40);
    for (int i = 0; i < 40; ++i) {
      EXPECT_NEAR(streamed.logprobs(i), scored.logprobs(static_cast<int>(prompt.size()) + i), 1e-4)
          << "token " << i;
    }
    EXPECT_LT(scored.total_logprob(), 0);
  }
}

TEST_F(ServiceTest, SixtyFourConcurrentGreedyStreamsEqualEachRunAlone) {
  const int kStreams = 64;
  std::vector<GenerateRequest> requests;
  std::vector<GenerateResponse> alone(kStreams), together(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    requests.push_back(
        Greedy(kModels[i % 3], absl::StrCat("the garden ", i, " finds"), 12 + i % 5));
    ASSERT_TRUE(Unary(requests[i], &alone[i]).ok());
  }
  std::vector<grpc::Status> statuses(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] { statuses[i] = Stream(requests[i], &together[i]); });
  }
  for (auto& thread : threads) thread.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(statuses[i].ok()) << i << ": " << statuses[i].error_message();
    EXPECT_EQ(together[i].text(), alone[i].text()) << i;
    EXPECT_EQ(together[i].token_ids_size(), alone[i].token_ids_size()) << i;
  }
}

TEST_F(ServiceTest, CancelledStreamFreesItsSlot) {
  grpc::ClientContext context;
  auto reader = stub_->GenerateStream(&context, Greedy("tiny-linear", "the river", 4000));
  GenerateResponse message;
  ASSERT_TRUE(reader->Read(&message));
  EXPECT_TRUE(EngineOf("tiny-linear").AwaitLoad(Running(1), absl::Now() + absl::Seconds(2)));
  EXPECT_EQ(EngineOf("tiny-linear").load().running, 1);
  context.TryCancel();
  while (reader->Read(&message)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(EngineOf("tiny-linear").AwaitLoad(Running(0), absl::Now() + absl::Seconds(2)));
  EXPECT_EQ(EngineOf("tiny-linear").load().running, 0);
}

TEST_F(ServiceTest, BadInputsGetTheirStatusCodesAndNameTheField) {
  struct Case {
    const char* name;
    GenerateRequest request;
    grpc::StatusCode code;
    const char* message_start;
  };
  auto with = [](std::function<void(GenerateRequest*)> edit) {
    GenerateRequest r;
    r.set_prompt("the river");
    r.set_max_tokens(4);
    edit(&r);
    return r;
  };
  const std::vector<Case> cases = {
      {"unknown model", with([](auto* r) { r->set_model("nope"); }), grpc::StatusCode::NOT_FOUND,
       "model:"},
      {"empty prompt", with([](auto* r) { r->set_prompt(""); }), grpc::StatusCode::INVALID_ARGUMENT,
       "prompt:"},
      {"invalid UTF-8", with([](auto* r) { r->set_prompt("bad \xFF\xFE"); }),
       grpc::StatusCode::INVALID_ARGUMENT, "prompt:"},
      {"negative temperature", with([](auto* r) { r->set_temperature(-1); }),
       grpc::StatusCode::INVALID_ARGUMENT, "temperature"},
      {"top_p", with([](auto* r) { r->set_top_p(2); }), grpc::StatusCode::INVALID_ARGUMENT,
       "top_p"},
      {"max_tokens 0", with([](auto* r) { r->set_max_tokens(0); }),
       grpc::StatusCode::INVALID_ARGUMENT, "max_tokens:"},
      {"max_tokens over", with([](auto* r) { r->set_max_tokens(100000); }),
       grpc::StatusCode::INVALID_ARGUMENT, "max_tokens:"},
      {"unknown token id", with([](auto* r) {
         r->clear_prompt();
         r->add_prompt_token_ids(7);
         r->add_prompt_token_ids(123456);
       }),
       grpc::StatusCode::INVALID_ARGUMENT, "prompt_token_ids[1]:"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    GenerateResponse response;
    grpc::Status unary = Unary(c.request, &response);
    EXPECT_EQ(unary.error_code(), c.code);
    EXPECT_TRUE(absl::StartsWith(unary.error_message(), c.message_start)) << unary.error_message();
    GenerateResponse streamed;
    grpc::Status stream = Stream(c.request, &streamed);
    EXPECT_EQ(stream.error_code(), c.code);
    EXPECT_TRUE(absl::StartsWith(stream.error_message(), c.message_start))
        << stream.error_message();
  }
  // The server still serves.
  GenerateResponse ok;
  EXPECT_TRUE(Unary(Greedy("tiny-aft", "the river", 3), &ok).ok());
}

TEST_F(ServiceTest, DeadlineIsHonoured) {
  GenerateResponse response;
  grpc::Status status = Unary(Greedy("tiny-aft", "the river", 4000), &response, 30);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(EngineOf("tiny-aft").AwaitLoad(Running(0), absl::Now() + absl::Seconds(2)));
  EXPECT_EQ(EngineOf("tiny-aft").load().running, 0);
}

TEST_F(ServiceTest, TokenizeDetokenizeRoundTrip) {
  const std::string text = "the river keeps \xF0\x9F\x98\x80 caf\xC3\xA9";
  grpc::ClientContext c1;
  attn::v1::TokenizeRequest tokenize;
  tokenize.set_text(text);
  attn::v1::TokenizeResponse ids;
  ASSERT_TRUE(stub_->Tokenize(&c1, tokenize, &ids).ok());
  grpc::ClientContext c2;
  attn::v1::DetokenizeRequest detokenize;
  *detokenize.mutable_token_ids() = ids.token_ids();
  attn::v1::DetokenizeResponse back;
  ASSERT_TRUE(stub_->Detokenize(&c2, detokenize, &back).ok());
  EXPECT_EQ(back.text(), text);
  grpc::ClientContext c3;
  detokenize.add_token_ids(-4);
  EXPECT_EQ(stub_->Detokenize(&c3, detokenize, &back).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ids.count(), ids.token_ids_size());

  // A conversation: the model's chat format rendered, then tokenized.
  attn::v1::TokenizeRequest chat;
  chat.set_model("tiny-aft");
  auto* message = chat.add_messages();
  message->set_role("user");
  message->set_content("hello");
  grpc::ClientContext c4;
  attn::v1::TokenizeResponse chat_ids;
  ASSERT_TRUE(stub_->Tokenize(&c4, chat, &chat_ids).ok());
  const std::string rendered = RenderChat(ChatFormat::kPlain, {{"user", "hello"}});
  grpc::ClientContext c5;
  attn::v1::DetokenizeRequest chat_back;
  *chat_back.mutable_token_ids() = chat_ids.token_ids();
  ASSERT_TRUE(stub_->Detokenize(&c5, chat_back, &back).ok());
  EXPECT_EQ(back.text(), rendered);
  chat.set_text("and text");
  grpc::ClientContext c6;
  const grpc::Status both = stub_->Tokenize(&c6, chat, &chat_ids);
  EXPECT_EQ(both.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(both.error_message(), "messages:")) << both.error_message();
}

double MetricValue(const std::string& exposition, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (absl::StartsWith(line, series + " ")) {
      return std::stod(std::string(line.substr(series.size() + 1)));
    }
  }
  return 0.0;
}

TEST_F(ServiceTest, StructuredOutputFollowsItsConstraint) {
  // A JSON Schema on every model (random weights at temperature 1): each
  // finished text parses and keeps the schema; a choice ends with the
  // choice; an unenforceable keyword is INVALID_ARGUMENT by its path.
  const char* schema = R"({"type":"object","properties":{"n":{"type":"integer","minimum":1,
      "maximum":9},"ok":{"type":"boolean"}},"required":["n","ok"],"additionalProperties":false})";
  for (const char* model : kModels) {
    GenerateRequest request = Greedy(model, "the river", 200);
    request.set_temperature(1.0f);
    request.set_seed(11);
    request.mutable_structured()->set_json_schema(schema);
    GenerateResponse merged;
    ASSERT_TRUE(Stream(request, &merged).ok()) << model;
    ASSERT_EQ(merged.finish_reason(), attn::v1::FINISH_REASON_STOP) << model << merged.text();
    const auto value = nlohmann::json::parse(merged.text());
    EXPECT_EQ(value.size(), 2u) << merged.text();
    EXPECT_GE(value["n"].get<int>(), 1);
    EXPECT_LE(value["n"].get<int>(), 9);
    EXPECT_TRUE(value["ok"].is_boolean());
  }
  GenerateRequest choice = Greedy("tiny-aft", "the river", 20);
  for (const char* c : {"north", "south"})
    choice.mutable_structured()->mutable_choice()->add_choices(c);
  GenerateResponse response;
  ASSERT_TRUE(Unary(choice, &response).ok());
  EXPECT_TRUE(response.text() == "north" || response.text() == "south") << response.text();
  EXPECT_EQ(response.finish_reason(), attn::v1::FINISH_REASON_STOP);
  GenerateRequest bad = Greedy("tiny-aft", "the river", 20);
  bad.mutable_structured()->set_json_schema(R"({"type":"array","contains":{"type":"string"}})");
  const grpc::Status refused = Unary(bad, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("structured.json_schema.contains"), std::string::npos)
      << refused.error_message();
}

TEST_F(ServiceTest, MetricCountersMove) {
  Metrics& metrics = server_->metrics();
  const std::string ok_series =
      "attn_requests_total{code=\"OK\",method=\"Generate\",model=\"tiny-aft\",protocol=\"grpc\"}";
  const std::string bad_series =
      "attn_requests_total{code=\"INVALID_ARGUMENT\",method=\"Generate\",model=\"tiny-aft\","
      "protocol=\"grpc\"}";
  const std::string tokens_series = "attn_generation_tokens_total{model=\"tiny-aft\"}";
  const std::string length_series =
      "attn_request_success_total{finish_reason=\"length\",model=\"tiny-aft\"}";
  const std::string before = metrics.Exposition();
  GenerateResponse response;
  ASSERT_TRUE(Unary(Greedy("tiny-aft", "the river", 9), &response).ok());
  GenerateRequest bad = Greedy("tiny-aft", "the river", 0);
  EXPECT_FALSE(Unary(bad, &response).ok());
  // A call is counted when its outcome is known, before its answer goes
  // out (server/core/call.h).
  const std::string after = metrics.Exposition();
  EXPECT_EQ(MetricValue(after, ok_series), MetricValue(before, ok_series) + 1);
  EXPECT_EQ(MetricValue(after, bad_series), MetricValue(before, bad_series) + 1);
  EXPECT_EQ(MetricValue(after, tokens_series), MetricValue(before, tokens_series) + 9);
  EXPECT_EQ(MetricValue(after, length_series), MetricValue(before, length_series) + 1);
  EXPECT_TRUE(absl::StrContains(after, "attn_time_to_first_token_seconds_bucket"));
  EXPECT_TRUE(absl::StrContains(after, "attn_model_info{"));
}

TEST_F(ServiceTest, HealthIsServingOverallAndPerModel) {
  EXPECT_EQ(Health(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Health("attn.v1.TextGeneration"), HealthCheckResponse::SERVING);
  for (const char* model : kModels) EXPECT_EQ(Health(model), HealthCheckResponse::SERVING);
}

// A server of its own hosting one tiny model, and a stub for it.
struct OwnServer {
  explicit OwnServer(const std::string& label, EngineOptions engine = {}) : dir(label) {
    attn::testing::WriteTinyPackage(dir.path().string(), "tiny-aft", MixerKind::kAftConv);
    server = StartServer(dir.path().string(), engine);
    if (server) {
      stub = attn::v1::TextGeneration::NewStub(grpc::CreateChannel(
          absl::StrCat("127.0.0.1:", server->port()), grpc::InsecureChannelCredentials()));
    }
  }
  attn::testing::ScopedTempDir dir;
  std::unique_ptr<InferenceServer> server;
  std::unique_ptr<attn::v1::TextGeneration::Stub> stub;
};

GenerateRequest Long(int max_tokens) {
  GenerateRequest request;
  request.set_prompt("the river");
  request.set_max_tokens(max_tokens);
  request.set_ignore_eos(true);
  return request;
}

TEST(ServiceLimitsTest, FullQueueIsResourceExhausted) {
  EngineOptions engine;
  engine.max_active = 1;
  engine.max_waiting = 0;
  OwnServer own("service_limits", engine);
  ASSERT_NE(own.server, nullptr);
  grpc::ClientContext long_context;
  auto reader = own.stub->GenerateStream(&long_context, Long(4000));
  GenerateResponse message;
  ASSERT_TRUE(reader->Read(&message));  // it holds the only slot
  grpc::ClientContext context;
  GenerateResponse response;
  grpc::Status status = own.stub->Generate(&context, Long(3), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  long_context.TryCancel();
  while (reader->Read(&message)) {
  }
  reader->Finish();
}

TEST(ServiceShutdownTest, RunningStreamsFinishAndNewWorkIsRefused) {
  OwnServer own("service_shutdown");
  ASSERT_NE(own.server, nullptr);
  grpc::ClientContext context;
  auto reader = own.stub->GenerateStream(&context, Long(2000));
  GenerateResponse message;
  ASSERT_TRUE(reader->Read(&message));
  std::thread shutdown([&] { own.server->Shutdown(); });
  // Once shutdown has begun, new work gets UNAVAILABLE from the service
  // itself (its message), while the stream above is still running.
  grpc::Status refused;
  for (int i = 0; i < 2000 && refused.ok(); ++i) {
    grpc::ClientContext late;
    GenerateResponse response;
    refused = own.stub->Generate(&late, Long(1), &response);
  }
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "shutting down"))
      << refused.error_message();
  int received = message.token_ids_size();
  while (reader->Read(&message)) received += message.token_ids_size();
  const grpc::Status status = reader->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();  // finished within the grace period
  EXPECT_EQ(received, 2000);
  shutdown.join();
}

}  // namespace
}  // namespace attn::serving

namespace attn::serving {
namespace {

TEST(ServiceStartTest, ACorruptModelIsNamedAndSkippedOnlyWhenAsked) {
  attn::testing::ScopedTempDir dir("service_start");
  const std::string good =
      attn::testing::WriteTinyPackage(dir.path().string(), "tiny-aft", MixerKind::kAftConv);
  // A copy cut to half its bytes, as an interrupted download leaves it.
  std::ifstream in(good, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string bad = dir.path().string() + "/broken.pt";
  std::ofstream(bad, std::ios::binary) << bytes.substr(0, bytes.size() / 2);

  ServerOptions options = testing::LocalServerOptions(dir.path().string());
  options.registry.default_model = "broken";
  auto refused = InferenceServer::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), bad)) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "--skip_bad_models"));

  options.registry.skip_bad_models = true;
  auto server = InferenceServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_EQ((*server)->registry().models().size(), 1u);
  EXPECT_EQ((*server)->registry().default_model(), "tiny-aft");  // the skipped default gave way
}

}  // namespace
}  // namespace attn::serving
