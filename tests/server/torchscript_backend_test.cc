// The TorchScript backend end to end: models written in plain PyTorch
// (examples/pytorch/tiny_rwkv.py, tests/python/make_contract_models.py),
// created at test time with Debian's python3-torch, served by a real server
// on 127.0.0.1 and called over gRPC; and this library's own packages served
// through their TorchScript methods.
#include "model/backend/torchscript_backend.h"

#include <ATen/Parallel.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/backend/native_backend.h"
#include "nlohmann/json.hpp"
#include "server/server.h"
#include "tests/server/requests.h"
#include "tests/server/test_server.h"
#include "tests/test_util.h"
#include "tests/tiny_model.h"
#include "util/files.h"
#include "util/hash64.h"
#include "util/memory.h"

namespace attn::serving {
namespace {

using attn::v1::GenerateRequest;
using attn::v1::GenerateResponse;

const std::string kPython = "/usr/bin/python3";
const std::string kSource = ATTN_SOURCE_DIR;
const std::vector<std::string> kPrompts = {"The river", "a small state", "hello world"};
constexpr int kTokens = 24;

void RunCommand(const std::string& command) {
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
}

absl::StatusOr<std::unique_ptr<InferenceServer>> Start(const std::vector<std::string>& paths,
                                                       const std::string& backend = "auto",
                                                       int64_t max_active = 32) {
  ServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.http_port = 0;
  options.metrics_port = 0;
  options.registry.paths = paths;
  options.registry.default_model = "";
  options.registry.engine.max_active = max_active;
  options.shutdown_grace = absl::Seconds(10);
  if (absl::Status parsed = ParseBackendFlag(backend, &options.registry); !parsed.ok()) {
    return parsed;
  }
  return InferenceServer::Start(options);
}

GenerateRequest Greedy(const std::string& model, const std::string& prompt, int max_tokens) {
  return testing::GreedyRequest(model, prompt, max_tokens);
}

class TorchScriptBackendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new attn::testing::ScopedTempDir("torchscript_backend");
    const std::string dir = dir_->path().string();
    RunCommand(absl::StrCat(kPython, " ", kSource,
                            "/examples/pytorch/tiny_rwkv.py --seed 3 --output ", dir,
                            "/rwkv.pt > /dev/null"));
    RunCommand(absl::StrCat(kPython, " ", kSource, "/tests/python/make_contract_models.py ", dir));
    std::string prompts;
    for (const auto& p : kPrompts) absl::StrAppend(&prompts, " '", p, "'");
    RunCommand(absl::StrCat(kPython, " ", kSource, "/tests/python/script_model_reference.py ", dir,
                            "/rwkv.pt ", kTokens, " ", dir, "/reference.json", prompts));
    std::ifstream in(dir + "/reference.json");
    reference_ = new nlohmann::json(nlohmann::json::parse(in));
    auto server = Start({dir + "/rwkv.pt", dir + "/counter.pt"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete reference_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                       grpc::InsecureChannelCredentials());
    stub_ = attn::v1::TextGeneration::NewStub(channel);
  }

  grpc::Status Stream(const GenerateRequest& request, GenerateResponse* merged) {
    return testing::StreamMerged(*stub_, request, merged);
  }

  static std::string Path(const std::string& name) { return dir_->File(name); }

  static attn::testing::ScopedTempDir* dir_;
  static nlohmann::json* reference_;
  static InferenceServer* server_;
  std::unique_ptr<attn::v1::TextGeneration::Stub> stub_;
};

attn::testing::ScopedTempDir* TorchScriptBackendTest::dir_ = nullptr;
nlohmann::json* TorchScriptBackendTest::reference_ = nullptr;
InferenceServer* TorchScriptBackendTest::server_ = nullptr;

TEST_F(TorchScriptBackendTest, GreedyStreamsEqualTheModulesOwnLoop) {
  for (const auto& expected : *reference_) {
    const std::string prompt = expected["prompt"];
    SCOPED_TRACE(prompt);
    GenerateResponse streamed;
    ASSERT_TRUE(Stream(Greedy("rwkv", prompt, kTokens), &streamed).ok());
    std::vector<int64_t> tokens(streamed.token_ids().begin(), streamed.token_ids().end());
    EXPECT_EQ(tokens, expected["greedy"].get<std::vector<int64_t>>());
  }
}

// The module's state rows copied out (return_state) and back in (state),
// and a cache hit on a repeated prompt: the same tokens as reading it all.
TEST_F(TorchScriptBackendTest, StatesRoundTripThroughTheModulesOwnRows) {
  GenerateRequest first = Greedy("rwkv", "The river", 10);
  first.set_return_state(true);
  GenerateResponse a;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->Generate(&context, first, &a).ok());
  }
  ASSERT_FALSE(a.state().empty());
  GenerateRequest next = Greedy("rwkv", "", 10);
  next.clear_prompt();
  next.add_prompt_token_ids(a.token_ids(0));
  next.set_state(a.state());
  GenerateResponse resumed;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->Generate(&context, next, &resumed).ok());
  }
  GenerateRequest whole = Greedy("rwkv", "", 10);
  whole.clear_prompt();
  for (int64_t id : a.state_token_ids()) whole.add_prompt_token_ids(id);
  whole.add_prompt_token_ids(a.token_ids(0));
  GenerateResponse uninterrupted;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->Generate(&context, whole, &uninterrupted).ok());
  }
  EXPECT_EQ(
      std::vector<int64_t>(resumed.token_ids().begin(), resumed.token_ids().end()),
      std::vector<int64_t>(uninterrupted.token_ids().begin(), uninterrupted.token_ids().end()));
  for (int i = 0; i < resumed.logprobs_size(); ++i) {
    EXPECT_NEAR(resumed.logprobs(i), uninterrupted.logprobs(i), 1e-4) << i;
  }
  // Sent again, the whole sequence is a cache hit with the same tokens.
  GenerateResponse again;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->Generate(&context, whole, &again).ok());
  }
  EXPECT_EQ(again.usage().cached_tokens(), whole.prompt_token_ids_size());
  EXPECT_EQ(
      std::vector<int64_t>(again.token_ids().begin(), again.token_ids().end()),
      std::vector<int64_t>(uninterrupted.token_ids().begin(), uninterrupted.token_ids().end()));
}

TEST_F(TorchScriptBackendTest, ScoreEqualsForwardLogSoftmax) {
  for (const auto& expected : *reference_) {
    const std::string prompt = expected["prompt"];
    attn::v1::ScoreRequest request;
    request.set_model("rwkv");
    for (unsigned char byte : prompt) request.add_token_ids(byte);
    for (int64_t id : expected["greedy"]) request.add_token_ids(id);
    grpc::ClientContext context;
    attn::v1::ScoreResponse scored;
    ASSERT_TRUE(stub_->Score(&context, request, &scored).ok());
    const auto logprobs = expected["score"].get<std::vector<double>>();
    ASSERT_EQ(scored.logprobs_size(), static_cast<int>(logprobs.size()));
    for (size_t i = 1; i < logprobs.size(); ++i) {
      EXPECT_NEAR(scored.logprobs(static_cast<int>(i)), logprobs[i], 1e-4) << prompt << " " << i;
    }
  }
}

TEST_F(TorchScriptBackendTest, SixteenConcurrentStreamsEqualEachRunAlone) {
  constexpr int kStreams = 16;
  std::vector<GenerateRequest> requests;
  std::vector<GenerateResponse> alone(kStreams), together(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    requests.push_back(Greedy("rwkv", absl::StrCat("stream ", i, " says"), 10 + i % 7));
    ASSERT_TRUE(Stream(requests[i], &alone[i]).ok());
  }
  std::vector<std::thread> threads;
  std::vector<grpc::Status> statuses(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] { statuses[i] = Stream(requests[i], &together[i]); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(statuses[i].ok()) << statuses[i].error_message();
    EXPECT_EQ(together[i].token_ids().size(), alone[i].token_ids().size()) << i;
    for (int j = 0; j < alone[i].token_ids_size(); ++j) {
      EXPECT_EQ(together[i].token_ids(j), alone[i].token_ids(j)) << i << " token " << j;
      EXPECT_NEAR(together[i].logprobs(j), alone[i].logprobs(j), 1e-4) << i << " token " << j;
    }
  }
}

TEST_F(TorchScriptBackendTest, ListModelsNamesTheBackend) {
  grpc::ClientContext context;
  attn::v1::ListModelsResponse models;
  ASSERT_TRUE(stub_->ListModels(&context, {}, &models).ok());
  ASSERT_EQ(models.models_size(), 2);
  for (const auto& model : models.models()) {
    EXPECT_EQ(model.backend(), "torchscript") << model.name();
    EXPECT_EQ(model.vocab_size(), 257);
    EXPECT_EQ(model.max_context(), 0);  // unbounded
  }
}

// A module that throws inside step fails the requests in that step with
// INTERNAL and its message; the model and the server go on serving.
TEST_F(TorchScriptBackendTest, AModuleThatThrowsFailsOnlyItsStep) {
  GenerateResponse failed;
  grpc::Status status = Stream(Greedy("counter", " ", 3), &failed);  // ' ' + 1 = '!' (33)
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "byte 33 is not allowed"))
      << status.error_message();
  GenerateResponse fine;
  ASSERT_TRUE(Stream(Greedy("counter", "a", 4), &fine).ok());
  std::vector<int64_t> tokens(fine.token_ids().begin(), fine.token_ids().end());
  EXPECT_EQ(tokens, (std::vector<int64_t>{'b', 'c', 'd', 'e'}));
  GenerateResponse other;
  EXPECT_TRUE(Stream(Greedy("rwkv", "still here", 4), &other).ok());
}

// Breaking the contract is a start-up error naming the method or tensor.
TEST_F(TorchScriptBackendTest, ContractViolationsAreStartupErrorsNamingTheProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"no_step.pt", "no method step()"},
      {"bad_state.pt", "init_state: state tensor 0 has shape [1, 2]; dim 0 must be the sequence"},
      {"bad_logits.pt", "step returned logits of shape [2, 100], expected [2, 257]"},
      {"no_config.pt", "no method init_state()"},
  };
  for (const auto& [file, message] : cases) {
    auto server = Start({Path(file)});
    ASSERT_FALSE(server.ok()) << file;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << file;
    EXPECT_TRUE(absl::StrContains(server.status().message(), message)) << server.status();
    EXPECT_TRUE(absl::StrContains(server.status().message(), file)) << server.status();
  }
}

// init_state writes all its rows at once, so rows that cannot fit in memory
// are refused up front (RESOURCE_EXHAUSTED naming --max_active) instead of
// the allocation filling memory; the backend then takes rows that fit.
TEST_F(TorchScriptBackendTest, RowsBeyondTheMemoryAvailableAreRefusedByName) {
  auto backend = TorchScriptBackend::Load(Path("rwkv.pt"), torch::kCPU);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const std::optional<int64_t> available = AvailableMemoryBytes();
  ASSERT_TRUE(available.has_value());
  ASSERT_GT((*backend)->bytes_per_row(), 0);
  const int64_t too_many = 2 * (*available / (*backend)->bytes_per_row()) + 1;
  absl::Status refused = (*backend)->AllocateRows(too_many);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "serve fewer rows")) << refused;
  ASSERT_TRUE((*backend)->AllocateRows(2).ok());
  ASSERT_TRUE((*backend)->ResetRow(1).ok());
  EXPECT_TRUE((*backend)->Step(torch::tensor({int64_t{3}}), torch::tensor({int64_t{1}})).ok());

  auto server = Start({Path("rwkv.pt")}, "auto", too_many);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kResourceExhausted) << server.status();
  EXPECT_TRUE(absl::StrContains(server.status().message(), absl::StrCat("--max_active=", too_many)))
      << server.status();
  EXPECT_TRUE(absl::StrContains(server.status().message(), "rwkv.pt")) << server.status();
}

// A model written by PyTorch passes the zip check (the suite's server
// serves rwkv.pt); one changed byte in its pickled module does not, although
// LibTorch alone would read it.
TEST_F(TorchScriptBackendTest, ADamagedModelIsDataLossNamingTheRecord) {
  std::string bytes = ReadFileBytes(Path("rwkv.pt")).value();
  const size_t global = bytes.find("c__torch__\n");  // the pickle's first class reference
  ASSERT_NE(global, std::string::npos);
  bytes[global + 1] = 'X';
  std::ofstream(Path("damaged.pt"), std::ios::binary) << bytes;
  auto loaded = TorchScriptBackend::Load(Path("damaged.pt"), torch::kCPU);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), "damaged.pt")) << loaded.status();
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), "data.pkl: CRC-32 mismatch"))
      << loaded.status();
}

// Quantising is the native backend's; a TorchScript model asked to is named.
TEST_F(TorchScriptBackendTest, QuantizeInt8RefusesATorchScriptModel) {
  ServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.http_port = 0;
  options.metrics_port = -1;
  options.registry.paths = {Path("rwkv.pt")};
  ASSERT_TRUE(ParseQuantizeFlag("int8", &options.registry).ok());
  auto server = InferenceServer::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(server.status().message(), "rwkv.pt")) << server.status();
  EXPECT_TRUE(absl::StrContains(server.status().message(),
                                "--quantize=int8 applies to the native backend only"))
      << server.status();
}

TEST_F(TorchScriptBackendTest, NativeBackendRefusesAnOutsideModel) {
  auto server = Start({Path("rwkv.pt")}, "native");
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(absl::StrContains(server.status().message(), "--backend=torchscript"))
      << server.status().message();
  EXPECT_EQ(Start({Path("rwkv.pt")}, "auto,nosuchmodel=native").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Start({Path("rwkv.pt")}, "fast").status().code(), absl::StatusCode::kInvalidArgument);
}

// This library's packages served through their TorchScript methods give the
// tokens and log-probabilities of the native backend.
TEST(TorchScriptBackendOfOwnPackages, EqualsTheNativeBackend) {
  attn::testing::ScopedTempDir dir("torchscript_own");
  std::vector<std::string> names;
  for (MixerKind kind : {MixerKind::kAftConv, MixerKind::kLinearElu, MixerKind::kMha}) {
    names.push_back(MixerKindName(kind));
    attn::testing::WriteTinyPackage(dir.path().string(), names.back(), kind);
  }
  auto native = Start({dir.path().string()}, "native");
  auto script = Start({dir.path().string()}, "torchscript");
  ASSERT_TRUE(native.ok()) << native.status();
  ASSERT_TRUE(script.ok()) << script.status();
  auto stub_of = [](InferenceServer& server) {
    return attn::v1::TextGeneration::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server.port()), grpc::InsecureChannelCredentials()));
  };
  auto native_stub = stub_of(**native), script_stub = stub_of(**script);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    GenerateRequest request = Greedy(name, "light falls over stone", 16);
    GenerateResponse a, b;
    grpc::ClientContext ca, cb;
    ASSERT_TRUE(native_stub->Generate(&ca, request, &a).ok());
    ASSERT_TRUE(script_stub->Generate(&cb, request, &b).ok());
    ASSERT_EQ(a.token_ids_size(), b.token_ids_size());
    for (int i = 0; i < a.token_ids_size(); ++i) {
      EXPECT_EQ(a.token_ids(i), b.token_ids(i)) << i;
      EXPECT_NEAR(a.logprobs(i), b.logprobs(i), 1e-4) << i;
    }
  }
}

// A step of many rows runs as one call per group of rows on the intra-op
// threads; rows at different lengths, in any pool order, still give the
// native backend's logits.
TEST(TorchScriptBackendSteps, GroupsOfRowsEqualTheNativeBackend) {
  const int previous_threads = at::get_num_threads();
  at::set_num_threads(2);
  attn::testing::ScopedTempDir dir("torchscript_groups");
  const std::string path =
      attn::testing::WriteTinyPackage(dir.path().string(), "aft", MixerKind::kAftConv);
  auto script = TorchScriptBackend::Load(path, torch::kCPU);
  ASSERT_TRUE(script.ok()) << script.status();
  // The fingerprint's hash, taken from the bytes the load read.
  EXPECT_EQ((*script)->file_hash(), Hash64(*ReadFileBytes(path)));
  NativeBackend native(attn::testing::TinyModel(MixerKind::kAftConv));
  constexpr int64_t kRows = 40;
  const int64_t vocab = native.vocab_size();
  for (LmBackend* backend :
       {static_cast<LmBackend*>(&native), static_cast<LmBackend*>(script->get())}) {
    ASSERT_TRUE(backend->AllocateRows(kRows).ok());
    for (int64_t r = 0; r < kRows; ++r) {
      ASSERT_TRUE(backend->ResetRow(r).ok());
      torch::manual_seed(r);
      auto prompt = torch::randint(0, vocab, {1, 1 + r % 7}, torch::kLong);
      ASSERT_TRUE(backend->Prefill(prompt, torch::tensor({r}), PrefillLogits::kNone).ok());
    }
  }
  auto rows = torch::randperm(kRows, torch::kLong);  // not consecutive: gathered and written back
  for (int step = 0; step < 3; ++step) {
    auto tokens = torch::randint(0, vocab, {kRows}, torch::kLong);
    auto expected = native.Step(tokens, rows);
    auto got = (*script)->Step(tokens, rows);
    ASSERT_TRUE(expected.ok() && got.ok()) << got.status();
    EXPECT_LT((*expected - *got).abs().max().item<double>(), 1e-4) << "step " << step;
  }
  at::set_num_threads(previous_threads);
}

// ShareWeights: a second backend over one model's weights (a draft model
// for several engines) starts without rows and keeps its rows apart from the
// first's, even with both stepping from their own threads.
void ExpectRowsApart(LmBackend& first) {
  std::unique_ptr<LmBackend> second = first.ShareWeights();
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->rows(), 0);
  EXPECT_EQ(second->vocab_size(), first.vocab_size());
  const int64_t vocab = first.vocab_size();
  torch::manual_seed(5);
  const auto prompt = torch::randint(0, vocab, {1, 6}, torch::kLong);
  const auto other = torch::randint(0, vocab, {1, 3}, torch::kLong);
  const auto row = torch::tensor({int64_t{0}});
  ASSERT_TRUE(first.AllocateRows(1).ok() && second->AllocateRows(1).ok());
  ASSERT_TRUE(first.ResetRow(0).ok() && second->ResetRow(0).ok());
  ASSERT_TRUE(first.Prefill(prompt, row, PrefillLogits::kNone).ok());
  ASSERT_TRUE(second->Prefill(other, row, PrefillLogits::kNone).ok());
  const auto tokens = torch::randint(0, vocab, {8}, torch::kLong);
  std::vector<torch::Tensor> alone;  // the first's steps, with the second idle
  absl::StatusOr<SavedRow> saved = first.SaveRow(0);
  ASSERT_TRUE(saved.ok());
  for (int64_t i = 0; i < tokens.size(0); ++i)
    alone.push_back(*first.Step(tokens.narrow(0, i, 1), row));
  ASSERT_TRUE(first.LoadRow(0, *saved).ok());
  std::thread noise([&] {
    torch::InferenceMode thread_guard;  // as each engine's thread runs
    for (int64_t i = 0; i < 4 * tokens.size(0); ++i) {
      absl::Status step = second->Step(tokens.narrow(0, i % tokens.size(0), 1), row).status();
      ASSERT_TRUE(step.ok()) << step;
    }
  });
  for (int64_t i = 0; i < tokens.size(0); ++i) {
    absl::StatusOr<torch::Tensor> got = first.Step(tokens.narrow(0, i, 1), row);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(torch::equal(*got, alone[i])) << "step " << i;
  }
  noise.join();
}

TEST(SharedWeights, NativeBackendsKeepTheirRowsApart) {
  torch::InferenceMode guard;
  NativeBackend native(attn::testing::TinyModel(MixerKind::kRwkv7));
  ExpectRowsApart(native);
  std::unique_ptr<LmBackend> shared = native.ShareWeights();
  auto& other = static_cast<NativeBackend&>(*shared);
  EXPECT_EQ(other.model()->parameters().front().data_ptr(),
            native.model()->parameters().front().data_ptr());
}

TEST(SharedWeights, TorchScriptBackendsKeepTheirRowsApart) {
  attn::testing::ScopedTempDir dir("torchscript_shared");
  auto script = TorchScriptBackend::Load(
      attn::testing::WriteTinyPackage(dir.path().string(), "aft", MixerKind::kAftDecay),
      torch::kCPU);
  ASSERT_TRUE(script.ok()) << script.status();
  ExpectRowsApart(**script);
}

}  // namespace
}  // namespace attn::serving
