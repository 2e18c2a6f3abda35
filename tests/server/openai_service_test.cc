// The OpenAI-compatible HTTP API in process: a real InferenceServer on
// 127.0.0.1 hosting tiny models, HTTP requests on real sockets, compared
// with what gRPC serves for the same request on the same server.
#include "server/http/openai_service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "model/text/chat_format.h"
#include "model/text/tokenizer.h"
#include "nlohmann/json.hpp"
#include "server/metrics/metrics.h"
#include "server/server.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"
#include "tests/test_util.h"
#include "tests/tiny_model.h"
#include "util/utf8.h"

namespace attn::serving {
namespace {

using Json = nlohmann::json;
using testing::Connect;
using testing::HttpReply;
using testing::Request;
using testing::SendAll;

class OpenAiServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new attn::testing::ScopedTempDir("openai_service_test");
    attn::testing::WriteTinyPackage(dir_->path().string(), "tiny-aft", MixerKind::kAftConv);
    attn::testing::WriteTinyPackage(dir_->path().string(), "tiny-linear", MixerKind::kLinearElu);
    server_ = testing::StartTestServer(dir_->path().string()).release();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(server_->http_port(), 0);
    stub_ = attn::v1::TextGeneration::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials()));
  }

  static HttpReply Post(const std::string& path, const Json& body) {
    return Request(server_->http_port(), "POST", path, body.dump());
  }
  static Json Body(const HttpReply& reply) { return Json::parse(reply.body, nullptr, false); }
  // The data payloads of a stream of server-sent events, [DONE] included.
  static std::vector<std::string> Events(const HttpReply& reply) {
    std::vector<std::string> events;
    for (absl::string_view event : absl::StrSplit(reply.body, "\n\n", absl::SkipEmpty())) {
      EXPECT_TRUE(absl::StartsWith(event, "data: ")) << event;
      events.emplace_back(event.substr(6));
    }
    return events;
  }
  static const HostedModel& Model(const std::string& name) {
    return **server_->registry().Find(name);
  }
  static std::string Exposition() { return server_->metrics().Exposition(); }

  // The same greedy request over gRPC's stream: its text, tokens and logprobs.
  attn::v1::GenerateResponse GrpcGreedy(const std::string& model, const std::string& prompt,
                                        int max_tokens, const std::vector<std::string>& stops) {
    attn::v1::GenerateRequest request;
    request.set_model(model);
    request.set_prompt(prompt);
    request.set_max_tokens(max_tokens);
    request.set_temperature(0);
    request.set_logprobs(true);
    for (const std::string& stop : stops) request.add_stop(stop);
    attn::v1::GenerateResponse merged;
    grpc::Status status = testing::StreamMerged(*stub_, request, &merged);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return merged;
  }

  static attn::testing::ScopedTempDir* dir_;
  static InferenceServer* server_;
  std::unique_ptr<attn::v1::TextGeneration::Stub> stub_;
};
attn::testing::ScopedTempDir* OpenAiServiceTest::dir_ = nullptr;
InferenceServer* OpenAiServiceTest::server_ = nullptr;

const char kPrompt[] = "the river keeps its state";

TEST_F(OpenAiServiceTest, ModelsListEveryHostedModel) {
  HttpReply list = Request(server_->http_port(), "GET", "/v1/models");
  ASSERT_EQ(list.status, 200) << list.body;
  const Json models = Body(list);
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(models["data"][0]["id"], "tiny-aft");
  EXPECT_EQ(models["data"][0]["object"], "model");
  EXPECT_EQ(models["data"][0]["attn"]["mixer"], "aft-conv");
  EXPECT_TRUE(models["data"][0]["attn"]["is_default"].get<bool>());
  EXPECT_EQ(models["data"][1]["attn"]["state_bytes_per_sequence"],
            Model("tiny-linear").description.state_bytes_per_sequence);
  HttpReply one = Request(server_->http_port(), "GET", "/v1/models/tiny-linear");
  ASSERT_EQ(one.status, 200);
  EXPECT_EQ(Body(one)["id"], "tiny-linear");
  HttpReply missing = Request(server_->http_port(), "GET", "/v1/models/nope");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(Body(missing)["error"]["code"], "model_not_found");

  // The attn object says what ListModels says, field for field.
  grpc::ClientContext context;
  attn::v1::ListModelsResponse listed;
  ASSERT_TRUE(stub_->ListModels(&context, {}, &listed).ok());
  ASSERT_EQ(listed.models_size(), 2);
  for (int i = 0; i < 2; ++i) {
    const attn::v1::ModelInfo& info = listed.models(i);
    const Json& attn = models["data"][i]["attn"];
    EXPECT_EQ(models["data"][i]["id"], info.name());
    EXPECT_EQ(attn["architecture"], info.architecture());
    EXPECT_EQ(attn["parameters"], info.parameters());
    EXPECT_EQ(attn["max_active_sequences"], info.max_active_sequences());
    EXPECT_EQ(attn["state_fingerprint"], info.state_fingerprint());
    EXPECT_EQ(attn["is_default"], info.is_default());
    EXPECT_EQ(attn["initial_states"].size(), static_cast<size_t>(info.initial_states_size()));
    // Every field ListModels sets, and nothing else.
    std::vector<const google::protobuf::FieldDescriptor*> set;
    info.GetReflection()->ListFields(info, &set);
    size_t expected = 0;
    for (const auto* field : set) {
      if (field->name() == "name") continue;
      ++expected;
      EXPECT_TRUE(attn.contains(field->name())) << field->name();
    }
    EXPECT_EQ(attn.size(), expected + (info.initial_states_size() == 0 ? 1 : 0)) << attn.dump();
  }
}

// The same greedy request over HTTP (whole and streamed) and over gRPC
// gives the same tokens and log-probabilities.
TEST_F(OpenAiServiceTest, GreedyCompletionsEqualGrpc) {
  for (const char* model : {"tiny-aft", "tiny-linear"}) {
    const attn::v1::GenerateResponse grpc = GrpcGreedy(model, kPrompt, 12, {});
    ASSERT_GT(grpc.token_ids_size(), 0) << model;
    const Tokenizer& tokenizer = *Model(model).tokenizer;
    const Json request = {{"model", model},
                          {"prompt", kPrompt},
                          {"max_tokens", 12},
                          {"temperature", 0},
                          {"logprobs", 0}};
    HttpReply whole = Post("/v1/completions", request);
    ASSERT_EQ(whole.status, 200) << whole.body;
    const Json choice = Body(whole)["choices"][0];
    EXPECT_EQ(choice["text"], grpc.text()) << model;
    const Json& logprobs = choice["logprobs"];
    ASSERT_EQ(logprobs["tokens"].size(), static_cast<size_t>(grpc.token_ids_size())) << model;
    for (int i = 0; i < grpc.token_ids_size(); ++i) {
      const std::string bytes = tokenizer.TokenBytes(grpc.token_ids(i));
      if (IsValidUtf8(bytes)) {
        EXPECT_EQ(logprobs["tokens"][i], bytes);
      }
      EXPECT_NEAR(logprobs["token_logprobs"][i].get<double>(), grpc.logprobs(i), 1e-6);
    }
    EXPECT_EQ(Body(whole)["usage"]["completion_tokens"], grpc.token_ids_size());

    Json streamed = request;
    streamed["stream"] = true;
    HttpReply stream = Post("/v1/completions", streamed);
    ASSERT_EQ(stream.status, 200);
    EXPECT_EQ(stream.headers["content-type"], "text/event-stream");
    const std::vector<std::string> events = Events(stream);
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(events.back(), "[DONE]");
    std::string text;
    std::vector<double> token_logprobs;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      const Json chunk = Json::parse(events[i]);
      text += chunk["choices"][0]["text"].get<std::string>();
      for (const Json& lp : chunk["choices"][0]["logprobs"]["token_logprobs"]) {
        token_logprobs.push_back(lp.get<double>());
      }
    }
    EXPECT_EQ(text, grpc.text());
    ASSERT_EQ(token_logprobs.size(), static_cast<size_t>(grpc.logprobs_size()));
    for (int i = 0; i < grpc.logprobs_size(); ++i) {
      EXPECT_NEAR(token_logprobs[i], grpc.logprobs(i), 1e-6);
    }
  }
}

// A chat is the model's chat format rendered, with its stops: the same as
// gRPC given that text.
TEST_F(OpenAiServiceTest, GreedyChatEqualsGrpcOnTheRenderedPrompt) {
  const std::vector<ChatMessage> messages = {{"system", "be brief"}, {"user", kPrompt}};
  const std::string rendered = RenderChat(ChatFormat::kPlain, messages);
  const attn::v1::GenerateResponse grpc =
      GrpcGreedy("tiny-linear", rendered, 10, ChatStops(ChatFormat::kPlain));
  ASSERT_GT(grpc.token_ids_size(), 0);
  const Json request = {
      {"model", "tiny-linear"},
      {"messages",
       {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", kPrompt}}}},
      {"max_tokens", 10},
      {"temperature", 0},
      {"logprobs", true},
      {"top_logprobs", 2}};
  HttpReply reply = Post("/v1/chat/completions", request);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json body = Body(reply);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], grpc.text());
  const Json& content = body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), static_cast<size_t>(grpc.logprobs_size()));
  for (int i = 0; i < grpc.logprobs_size(); ++i) {
    EXPECT_NEAR(content[i]["logprob"].get<double>(), grpc.logprobs(i), 1e-6);
    ASSERT_EQ(content[i]["top_logprobs"].size(), 2u);
    // Greedy: the chosen token is the most likely one.
    EXPECT_NEAR(content[i]["top_logprobs"][0]["logprob"].get<double>(), grpc.logprobs(i), 1e-6);
  }
  EXPECT_EQ(body["usage"]["prompt_tokens"],
            static_cast<int64_t>(Model("tiny-linear").tokenizer->Encode(rendered).size()));
}

TEST_F(OpenAiServiceTest, ChoicesAreSeededAndStreamedWithUsage) {
  Json request = {{"messages", {{{"role", "user"}, {"content", kPrompt}}}},
                  {"max_tokens", 8},
                  {"n", 3},
                  {"seed", 42},
                  {"temperature", 1.0}};
  const Json first = Body(Post("/v1/chat/completions", request));
  const Json again = Body(Post("/v1/chat/completions", request));
  ASSERT_EQ(first["choices"].size(), 3u) << first.dump();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(first["choices"][i]["index"], i);
    EXPECT_EQ(first["choices"][i]["message"]["content"], again["choices"][i]["message"]["content"]);
  }
  EXPECT_EQ(first["model"], "tiny-aft");  // the default

  request["stream"] = true;
  request["stream_options"] = {{"include_usage", true}};
  const std::vector<std::string> events = Events(Post("/v1/chat/completions", request));
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::vector<std::string> texts(3);
  std::vector<int> roles(3), finishes(3);
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const Json chunk = Json::parse(events[i]);
    const int index = chunk["choices"][0]["index"];
    const Json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("role")) ++roles[index];
    if (delta.contains("content")) texts[index] += delta["content"].get<std::string>();
    if (!chunk["choices"][0]["finish_reason"].is_null()) ++finishes[index];
  }
  const Json usage = Json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], usage["usage"]["prompt_tokens"].get<int>() +
                                                usage["usage"]["completion_tokens"].get<int>());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(texts[i], first["choices"][i]["message"]["content"]) << i;
    EXPECT_EQ(roles[i], 1);
    EXPECT_EQ(finishes[i], 1);
  }
}

TEST_F(OpenAiServiceTest, TheStateCacheAndTheClientHeldStateAreReported) {
  const Json request = {{"model", "tiny-linear"},
                        {"prompt", std::string(kPrompt) + " and more"},
                        {"max_tokens", 4},
                        {"temperature", 0},
                        {"attn_return_state", true}};
  Post("/v1/completions", request);
  const Json again = Body(Post("/v1/completions", request));
  EXPECT_GT(again["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << again.dump();
  const Json& state = again["choices"][0]["attn_state"];
  ASSERT_TRUE(state.is_object()) << again.dump();
  // Continuing from the returned state reads only the new prompt.
  const Json next = {
      {"model", "tiny-linear"}, {"prompt", " then"}, {"max_tokens", 2}, {"attn_state", state}};
  const Json continued = Body(Post("/v1/completions", next));
  EXPECT_EQ(continued["usage"]["prompt_tokens_details"]["cached_tokens"], state["tokens"])
      << continued.dump();
  // A state for another model is refused naming the field.
  Json wrong = next;
  wrong["model"] = "tiny-aft";
  HttpReply refused = Post("/v1/completions", wrong);
  EXPECT_EQ(refused.status, 400);
  EXPECT_TRUE(absl::StartsWith(Body(refused)["error"]["param"].get<std::string>(), "attn_state"))
      << refused.body;
}

TEST_F(OpenAiServiceTest, RefusalsCarryTheirStatusAndField) {
  HttpReply bad = Post("/v1/chat/completions",
                       {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"temperature", 9}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(Body(bad)["error"]["param"], "temperature");
  HttpReply tools =
      Post("/v1/chat/completions",
           {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"tools", Json::array()}});
  EXPECT_EQ(tools.status, 400);
  EXPECT_EQ(Body(tools)["error"]["param"], "tools");
  HttpReply broken = Request(server_->http_port(), "POST", "/v1/completions", "{\"prompt\": ");
  EXPECT_EQ(broken.status, 400);
  EXPECT_TRUE(absl::StrContains(Body(broken)["error"]["message"].get<std::string>(), "at byte"));
  HttpReply unknown = Post("/v1/completions", {{"model", "nope"}, {"prompt", "x"}});
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(Body(unknown)["error"]["code"], "model_not_found");
  HttpReply token = Post("/v1/completions", {{"prompt", {1, 2, 1000000}}});
  EXPECT_EQ(token.status, 400);
  EXPECT_EQ(Body(token)["error"]["param"], "prompt[2]");
  HttpReply too_long = Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1 << 30}});
  EXPECT_EQ(too_long.status, 400);
  EXPECT_EQ(Body(too_long)["error"]["param"], "max_tokens");
  const std::string big = testing::Exchange(
      server_->http_port(), "POST /v1/completions HTTP/1.1\r\nContent-Length: 10485760\r\n\r\n{");
  EXPECT_TRUE(absl::StartsWith(big, "HTTP/1.1 413")) << big.substr(0, 100);
  EXPECT_TRUE(absl::StrContains(
      Exposition(),
      "attn_requests_total{code=\"INVALID_ARGUMENT\",method=\"ChatCompletions\",model=\"\","
      "protocol=\"http\"}"));
}

TEST_F(OpenAiServiceTest, AClientThatLeavesAStreamFreesItsSlotAtOnce) {
  const Engine& engine = *Model("tiny-aft").engine;
  const int fd = Connect(server_->http_port());
  const std::string body =
      Json{{"prompt", kPrompt}, {"max_tokens", 4000}, {"stream", true}, {"attn_ignore_eos", true}}
          .dump();
  ASSERT_TRUE(SendAll(fd, absl::StrCat("POST /v1/completions HTTP/1.1\r\nContent-Length: ",
                                       body.size(), "\r\n\r\n", body)));
  char buffer[4096];
  ASSERT_GT(recv(fd, buffer, sizeof(buffer), 0), 0);  // the stream has begun
  ASSERT_TRUE(engine.AwaitLoad([](const EngineLoad& l) { return l.running == 1; },
                               absl::Now() + absl::Seconds(2)));
  close(fd);
  EXPECT_TRUE(engine.AwaitLoad([](const EngineLoad& l) { return l.running == 0; },
                               absl::Now() + absl::Seconds(1)));
  // The call was counted before its streams were told to stop.
  EXPECT_TRUE(absl::StrContains(Exposition(), "code=\"CANCELLED\",method=\"Completions\""));
}

// Connections that hold the server's attention cost it nothing: with 1,000
// idle keep-alive clients, 200 clients sending their head a byte at a
// time and 300 that sent half a request line, a completion, a model list
// and a scrape (on both ports) each answer within a second.
TEST_F(OpenAiServiceTest, IdleAndSlowClientsDoNotDelayOthers) {
  const int port = server_->http_port();
  std::vector<int> held;
  for (int i = 0; i < 1000; ++i) {
    const int fd = Connect(port);
    ASSERT_GE(fd, 0) << i;
    ASSERT_TRUE(SendAll(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
    held.push_back(fd);
  }
  for (int fd : held) {  // each has had its answer and stays open
    char buffer[512];
    ASSERT_GT(recv(fd, buffer, sizeof(buffer), 0), 0);
  }
  std::vector<int> slow;
  for (int i = 0; i < 200; ++i) slow.push_back(Connect(port));
  for (int i = 0; i < 300; ++i) {
    for (int target : {port, server_->metrics_port()}) {
      const int fd = Connect(target);
      ASSERT_TRUE(SendAll(fd, "GET /metr"));
      held.push_back(fd);
    }
  }
  // Each slow client sends its next byte before every timed request, so
  // the server has partial heads to read while it answers.
  const std::string head = "POST /v1/completions HTTP/1.1\r\nContent-Length: 10\r\n";
  size_t sent = 0;
  auto trickle = [&] {
    for (int fd : slow) send(fd, head.data() + sent, 1, MSG_NOSIGNAL);
    ++sent;
  };
  trickle();
  auto timed = [&](auto request) {
    trickle();
    const absl::Time start = absl::Now();
    const HttpReply reply = request();
    EXPECT_EQ(reply.status, 200) << reply.body;
    return absl::Now() - start;
  };
  EXPECT_LT(timed([&] {
              return Post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 2}});
            }),
            absl::Seconds(1));
  EXPECT_LT(timed([&] { return Request(port, "GET", "/v1/models"); }), absl::Seconds(1));
  EXPECT_LT(timed([&] { return Request(server_->metrics_port(), "GET", "/metrics"); }),
            absl::Seconds(1));
  EXPECT_LT(timed([&] { return Request(port, "GET", "/metrics"); }), absl::Seconds(1));
  for (int fd : held) close(fd);
  for (int fd : slow) close(fd);
}

// vLLM's tokenize endpoints: a prompt's ids as gRPC gives them; a chat's
// as the chat completion counts its prompt; ids back to text; refusals name
// their field.
TEST_F(OpenAiServiceTest, TokenizeAndDetokenize) {
  HttpReply plain = Post("/tokenize", {{"model", "tiny-aft"}, {"prompt", kPrompt}});
  ASSERT_EQ(plain.status, 200) << plain.body;
  const Json tokens = Body(plain);
  EXPECT_EQ(tokens["tokens"].get<std::vector<int64_t>>(),
            Model("tiny-aft").tokenizer->Encode(kPrompt));
  EXPECT_EQ(tokens["count"], tokens["tokens"].size());
  const int64_t max_context = Model("tiny-aft").description.max_context;  // 0: unbounded
  EXPECT_EQ(tokens["max_model_len"], max_context > 0 ? Json(max_context) : Json(nullptr));
  HttpReply back = Post("/detokenize", {{"model", "tiny-aft"}, {"tokens", tokens["tokens"]}});
  ASSERT_EQ(back.status, 200) << back.body;
  EXPECT_EQ(Body(back)["prompt"], kPrompt);

  const Json messages = {{{"role", "system"}, {"content", "be brief"}},
                         {{"role", "user"}, {"content", kPrompt}}};
  HttpReply chat_ids = Post("/tokenize", {{"model", "tiny-linear"}, {"messages", messages}});
  ASSERT_EQ(chat_ids.status, 200) << chat_ids.body;
  HttpReply chat = Post("/v1/chat/completions",
                        {{"model", "tiny-linear"}, {"messages", messages}, {"max_tokens", 2}});
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(Body(chat_ids)["count"], Body(chat)["usage"]["prompt_tokens"]);
  HttpReply no_cue =
      Post("/tokenize",
           {{"model", "tiny-linear"}, {"messages", messages}, {"add_generation_prompt", false}});
  ASSERT_EQ(no_cue.status, 200) << no_cue.body;
  HttpReply no_cue_text =
      Post("/detokenize", {{"model", "tiny-linear"}, {"tokens", Body(no_cue)["tokens"]}});
  EXPECT_EQ(Body(no_cue_text)["prompt"],
            RenderChat(ChatFormat::kPlain, {{"system", "be brief"}, {"user", kPrompt}}, false));

  struct Refusal {
    const char* path;
    Json body;
    int status;
    const char* param;
  };
  const Refusal refusals[] = {
      {"/tokenize", {{"prompt", "a"}, {"messages", messages}}, 400, "prompt"},
      {"/tokenize", {{"model", "tiny-aft"}}, 400, "prompt"},
      {"/tokenize", {{"prompt", "a"}, {"tools", Json::array()}}, 400, "tools"},
      {"/tokenize", {{"prompt", "a"}, {"add_special_tokens", "yes"}}, 400, "add_special_tokens"},
      {"/tokenize", {{"prompt", "a"}, {"model", "nope"}}, 404, "model"},
      {"/detokenize", {{"tokens", {1, -2}}}, 400, "tokens[1]"},
      {"/detokenize", {{"tokens", "abc"}}, 400, "tokens"},
  };
  for (const Refusal& r : refusals) {
    HttpReply refused = Post(r.path, r.body);
    EXPECT_EQ(refused.status, r.status) << r.body.dump() << ": " << refused.body;
    EXPECT_EQ(Body(refused)["error"]["param"], r.param) << r.body.dump();
  }
  EXPECT_TRUE(absl::StrContains(Exposition(),
                                "attn_requests_total{code=\"OK\",method=\"Tokenize\","
                                "model=\"tiny-aft\",protocol=\"http\"}"));
}

TEST_F(OpenAiServiceTest, HealthAndTheChatPage) {
  HttpReply health = Request(server_->http_port(), "GET", "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(Body(health)["status"], "SERVING");
  EXPECT_EQ(Request(server_->http_port(), "GET", "/health/tiny-linear").status, 200);
  EXPECT_EQ(Request(server_->http_port(), "GET", "/health/nope").status, 404);
  HttpReply page = Request(server_->http_port(), "GET", "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_TRUE(absl::StartsWith(page.headers["content-type"], "text/html"));
  EXPECT_TRUE(absl::StrContains(page.body, "/v1/chat/completions"));
  // Self-contained: nothing loads from elsewhere.
  EXPECT_FALSE(absl::StrContains(page.body, "http://"));
  EXPECT_FALSE(absl::StrContains(page.body, "https://"));
}

// Draining: health turns 503 and new requests get 503 at once, and a stream
// still running when the grace ends gets the error as an event, then the
// end of the stream.
TEST(OpenAiShutdownTest, DrainingRefusesNewRequestsAndEndsStreamsWithAnError) {
  attn::testing::ScopedTempDir dir("openai_shutdown_test");
  attn::testing::WriteTinyPackage(dir.path().string(), "tiny-aft", MixerKind::kAftConv);
  ServerOptions options = testing::LocalServerOptions(dir.path().string());
  options.registry.engine.limits.max_tokens = 1000000;
  options.shutdown_grace = absl::Seconds(1);
  auto server = InferenceServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->http_port();

  const int fd = Connect(port);
  const std::string body = Json{
      {"prompt", kPrompt},
      {"max_tokens", 1000000},
      {"stream", true},
      {"attn_ignore_eos",
       true}}.dump();
  ASSERT_TRUE(SendAll(fd, absl::StrCat("POST /v1/completions HTTP/1.1\r\nContent-Length: ",
                                       body.size(), "\r\n\r\n", body)));
  std::string streamed;
  std::thread reader([&] { streamed = testing::ReadToClose(fd); });
  ASSERT_TRUE((*server)
                  ->registry()
                  .Find("tiny-aft")
                  .value()
                  ->engine->AwaitLoad([](const EngineLoad& l) { return l.running == 1; },
                                      absl::Now() + absl::Seconds(2)));

  std::thread stopper([&] { (*server)->Shutdown(); });
  // Shutdown stops accepting before it drains the engines.
  ASSERT_TRUE((*server)
                  ->registry()
                  .Find("tiny-aft")
                  .value()
                  ->engine->AwaitLoad([](const EngineLoad& l) { return l.draining; },
                                      absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(Request(port, "GET", "/health").status, 503);
  HttpReply late = Request(port, "POST", "/v1/completions", Json{{"prompt", "x"}}.dump());
  EXPECT_EQ(late.status, 503) << late.body;
  EXPECT_EQ(Json::parse(late.body)["error"]["type"], "server_unavailable");
  stopper.join();
  reader.join();
  close(fd);
  const testing::HttpReply reply = testing::ParseReply(streamed);
  const std::vector<std::string> tail =
      absl::StrSplit(reply.body.substr(reply.body.size() > 400 ? reply.body.size() - 400 : 0),
                     "\n\n", absl::SkipEmpty());
  ASSERT_GE(tail.size(), 2u);
  EXPECT_EQ(tail.back(), "data: [DONE]");
  EXPECT_TRUE(absl::StrContains(tail[tail.size() - 2], "\"type\":\"server_unavailable\""))
      << tail[tail.size() - 2];
}

// HTTP requests have deadlines: the server's (--http_timeout_seconds) ends
// a whole response with 504, and a client's shorter X-Stainless-Timeout
// ends a stream with a timeout event; the server goes on serving.
TEST(OpenAiDeadlineTest, TheServersTimeoutAndTheClientsShorterOneEndRequests) {
  attn::testing::ScopedTempDir dir("openai_deadline_test");
  attn::testing::WriteTinyPackage(dir.path().string(), "tiny-aft", MixerKind::kAftConv);
  ServerOptions options = testing::LocalServerOptions(dir.path().string());
  options.registry.engine.limits.max_tokens = 1000000;
  options.http_timeout = absl::Seconds(2);
  auto server = InferenceServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->http_port();
  auto endless = [](bool stream) {
    return Json{
        {"prompt", kPrompt}, {"max_tokens", 1000000}, {"stream", stream}, {"attn_ignore_eos", true}}
        .dump();
  };
  HttpReply streamed;
  absl::Duration streamed_for;
  std::thread client([&] {
    const absl::Time start = absl::Now();
    streamed =
        Request(port, "POST", "/v1/completions", endless(true), "X-Stainless-Timeout: 1\r\n");
    streamed_for = absl::Now() - start;
  });
  const absl::Time start = absl::Now();
  HttpReply whole = Request(port, "POST", "/v1/completions", endless(false));
  const absl::Duration whole_for = absl::Now() - start;
  client.join();

  EXPECT_EQ(whole.status, 504) << whole.body.substr(0, 300);
  EXPECT_EQ(Json::parse(whole.body, nullptr, false)["error"]["type"], "timeout");
  EXPECT_GE(whole_for, absl::Seconds(2));
  ASSERT_EQ(streamed.status, 200);
  const std::vector<std::string> tail = absl::StrSplit(
      streamed.body.substr(streamed.body.size() > 400 ? streamed.body.size() - 400 : 0), "\n\n",
      absl::SkipEmpty());
  ASSERT_GE(tail.size(), 2u);
  EXPECT_EQ(tail.back(), "data: [DONE]");
  EXPECT_TRUE(absl::StrContains(tail[tail.size() - 2], "\"type\":\"timeout\""))
      << tail[tail.size() - 2];
  EXPECT_GE(streamed_for, absl::Seconds(1));
  EXPECT_LT(streamed_for, whole_for);
  HttpReply after =
      Request(port, "POST", "/v1/completions", Json{{"prompt", kPrompt}, {"max_tokens", 3}}.dump());
  EXPECT_EQ(after.status, 200) << after.body;
}

}  // namespace
}  // namespace attn::serving
