// The continuous-batching engine, driven one iteration at a time with a fake
// clock and tiny random models.
#include "server/engine/engine.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "tests/server/fake_clock.h"
#include "tests/server/requests.h"
#include "tests/tiny_model.h"

namespace attn::serving {
namespace {

using attn::testing::TinyConfig;
using attn::testing::TinyModel;
using attn::testing::TinyTokenizer;

using attn::testing::FakeClock;

// Rows per step, by phase.
class StepLog : public EngineObserver {
 public:
  void OnStep(Phase phase, absl::Duration, int64_t rows, int64_t) override {
    (phase == Phase::kDecode ? decode_rows : prefill_rows).push_back(rows);
  }
  std::vector<int64_t> decode_rows;
  std::vector<int64_t> prefill_rows;
};

struct Output {
  std::vector<int64_t> ids;
  std::vector<float> logprobs;
  std::string text;
  std::vector<size_t> message_tokens;  // tokens per event, in order
  bool done = false;
  StreamEvent last;
};

// Reads everything queued on `stream` into `out`.
void Read(RequestStream& stream, Output* out) {
  for (auto events = stream.PopReady(); !events.empty(); events = stream.PopReady()) {
    for (const StreamEvent& event : events) {
      out->message_tokens.push_back(event.token_ids.size());
      out->ids.insert(out->ids.end(), event.token_ids.begin(), event.token_ids.end());
      out->logprobs.insert(out->logprobs.end(), event.logprobs.begin(), event.logprobs.end());
      out->text += event.text;
      if (event.last) {
        out->done = true;
        out->last = event;
      }
    }
  }
}

// Reads `stream` into `out` as events arrive, woken by its listener, until
// the last event or `timeout`; returns whether the request ended. `start`,
// if given, runs once the listener is in place: a request submitted there
// has `on_push` called for every push, even one that ends at once.
bool ReadUntilDone(RequestStream& stream, Output* out, absl::Duration timeout,
                   const std::function<void()>& on_push = nullptr,
                   const std::function<void()>& start = nullptr) {
  absl::Mutex mu;
  bool pushed = false;
  stream.SetListener([&] {
    if (on_push) on_push();  // on the engine's thread, as it pushes
    absl::MutexLock lock(&mu);
    pushed = true;
  });
  if (start) start();
  const absl::Time give_up = absl::Now() + timeout;
  Read(stream, out);
  while (!out->done) {
    {
      absl::MutexLock lock(&mu);
      if (!mu.AwaitWithDeadline(absl::Condition(&pushed), give_up)) break;
      pushed = false;
    }
    Read(stream, out);
  }
  stream.ClearListener();
  return out->done;
}

EngineRequest Greedy(std::vector<int64_t> prompt, int64_t max_tokens) {
  return testing::GreedyEngineRequest(std::move(prompt), max_tokens);
}

std::vector<int64_t> Prompt(int64_t length, int64_t offset) {
  return testing::SyntheticIds(length, offset);
}

class EngineTest : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> MakeEngine(EngineOptions options = {}, EngineObserver* observer = nullptr,
                                     MixerKind kind = MixerKind::kAftConv) {
    return EngineFor(TinyModel(kind), options, observer);
  }
  std::unique_ptr<Engine> EngineFor(CausalLm model, EngineOptions options = {},
                                    EngineObserver* observer = nullptr) {
    model_ = std::move(model);
    return std::make_unique<Engine>(model_, TinyTokenizer(), options, clock_, observer);
  }
  // Runs iterations until every output is done (at most `limit`).
  void RunUntilDone(Engine& engine, std::vector<std::pair<RequestStream*, Output*>> streams,
                    int limit = 2000) {
    for (int i = 0; i < limit; ++i) {
      engine.RunOnce();
      bool all_done = true;
      for (auto& [stream, out] : streams) {
        Read(*stream, out);
        all_done &= out->done;
      }
      if (all_done) return;
    }
    FAIL() << "requests did not finish in " << limit << " iterations";
  }
  Output RunAlone(const EngineRequest& request, MixerKind kind = MixerKind::kAftConv) {
    auto engine = MakeEngine({}, nullptr, kind);
    auto stream = std::make_shared<RequestStream>(1000);
    EXPECT_TRUE(engine->Submit(request, stream).ok());
    Output out;
    RunUntilDone(*engine, {{stream.get(), &out}});
    return out;
  }

  FakeClock clock_;
  CausalLm model_{nullptr};
};

TEST_F(EngineTest, RequestsJoinAndLeaveMidBatchWithoutChangingEachOther) {
  const EngineRequest a = Greedy(Prompt(5, 0), 12);
  const EngineRequest b = Greedy(Prompt(9, 11), 5);
  const Output a_alone = RunAlone(a);
  const Output b_alone = RunAlone(b);

  StepLog log;
  auto engine = MakeEngine({}, &log);
  auto stream_a = std::make_shared<RequestStream>(1000);
  auto stream_b = std::make_shared<RequestStream>(1000);
  ASSERT_TRUE(engine->Submit(a, stream_a).ok());
  Output out_a, out_b;
  for (int i = 0; i < 3; ++i) engine->RunOnce();
  Read(*stream_a, &out_a);
  ASSERT_FALSE(out_a.ids.empty());
  ASSERT_TRUE(engine->Submit(b, stream_b).ok());  // joins a running batch
  RunUntilDone(*engine, {{stream_a.get(), &out_a}, {stream_b.get(), &out_b}});

  EXPECT_EQ(out_a.ids, a_alone.ids);
  EXPECT_EQ(out_b.ids, b_alone.ids);
  EXPECT_EQ(out_a.text, a_alone.text);
  for (size_t i = 0; i < out_a.logprobs.size(); ++i) {
    EXPECT_NEAR(out_a.logprobs[i], a_alone.logprobs[i], 1e-5);
  }
  EXPECT_EQ(out_b.last.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out_b.last.completion_tokens, 5);
  EXPECT_EQ(out_a.last.completion_tokens, 12);
  // Both decoded together, then a alone after b left.
  EXPECT_NE(std::find(log.decode_rows.begin(), log.decode_rows.end(), 2), log.decode_rows.end());
  EXPECT_EQ(log.decode_rows.back(), 1);
  EXPECT_EQ(engine->load().running, 0);
}

TEST_F(EngineTest, CancelledRequestFreesItsSlotAtTheNextIteration) {
  EngineOptions options;
  options.max_active = 1;
  auto engine = MakeEngine(options);
  auto first = std::make_shared<RequestStream>(1000);
  auto second = std::make_shared<RequestStream>(1000);
  ASSERT_TRUE(engine->Submit(Greedy(Prompt(4, 0), 1000), first).ok());
  for (int i = 0; i < 3; ++i) engine->RunOnce();
  ASSERT_TRUE(engine->Submit(Greedy(Prompt(4, 5), 3), second).ok());
  engine->RunOnce();
  EXPECT_EQ(engine->load().waiting, 1);  // the only slot is taken

  first->Cancel();
  engine->RunOnce();
  Output out_first;
  Read(*first, &out_first);
  ASSERT_TRUE(out_first.done);
  EXPECT_EQ(out_first.last.status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(engine->load().waiting, 0);  // the freed slot went to the next request
  EXPECT_EQ(engine->load().running, 1);
  Output out_second;
  RunUntilDone(*engine, {{second.get(), &out_second}});
  EXPECT_TRUE(out_second.last.status.ok());
}

TEST_F(EngineTest, FullQueueIsResourceExhaustedAndQueuesNothing) {
  EngineOptions options;
  options.max_active = 1;
  options.max_waiting = 1;
  auto engine = MakeEngine(options);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 2; ++i) {
    streams.push_back(std::make_shared<RequestStream>(1000));
    ASSERT_TRUE(engine->Submit(Greedy(Prompt(3, i), 50), streams.back()).ok());
  }
  engine->RunOnce();  // one runs, one waits
  auto rejected = std::make_shared<RequestStream>(1000);
  absl::Status status = engine->Submit(Greedy(Prompt(3, 9), 50), rejected);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(engine->load().running + engine->load().waiting, 2);
  EXPECT_TRUE(rejected->PopReady().empty());
}

TEST_F(EngineTest, PassedDeadlineEndsRunningAndWaitingRequests) {
  EngineOptions options;
  options.max_active = 1;
  auto engine = MakeEngine(options);
  auto running = std::make_shared<RequestStream>(1000);
  auto waiting = std::make_shared<RequestStream>(1000);
  EngineRequest r1 = Greedy(Prompt(4, 0), 1000);
  r1.deadline = clock_.Now() + absl::Seconds(1);
  EngineRequest r2 = Greedy(Prompt(4, 1), 10);
  r2.deadline = clock_.Now() + absl::Seconds(1);
  ASSERT_TRUE(engine->Submit(r1, running).ok());
  ASSERT_TRUE(engine->Submit(r2, waiting).ok());
  for (int i = 0; i < 3; ++i) engine->RunOnce();
  clock_.Advance(absl::Seconds(2));
  engine->RunOnce();
  Output out_running, out_waiting;
  Read(*running, &out_running);
  Read(*waiting, &out_waiting);
  ASSERT_TRUE(out_running.done);
  ASSERT_TRUE(out_waiting.done);
  EXPECT_EQ(out_running.last.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(out_waiting.last.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GT(out_running.ids.size(), 0u);
  EXPECT_EQ(engine->load().running, 0);
}

TEST_F(EngineTest, SlowReaderPausesItsSequenceOnlyAndResumesWhereItWas) {
  const EngineRequest slow_request = Greedy(Prompt(6, 2), 20);
  const EngineRequest fast_request = Greedy(Prompt(6, 7), 20);
  const Output slow_alone = RunAlone(slow_request);
  EngineOptions options;
  options.stream_buffer = 3;
  auto engine = MakeEngine(options);
  auto slow = std::make_shared<RequestStream>(3);
  auto fast = std::make_shared<RequestStream>(3);
  ASSERT_TRUE(engine->Submit(slow_request, slow).ok());
  ASSERT_TRUE(engine->Submit(fast_request, fast).ok());
  Output out_fast;
  RunUntilDone(*engine, {{fast.get(), &out_fast}});  // never reads `slow`
  EXPECT_EQ(out_fast.ids.size(), 20u);
  EXPECT_EQ(engine->load().running, 1);  // the slow one keeps its slot...
  EXPECT_TRUE(slow->full());             // ...with no more than its buffer queued
  Output out_slow;
  RunUntilDone(*engine, {{slow.get(), &out_slow}});
  EXPECT_EQ(out_slow.ids, slow_alone.ids);
}

// With stream_interval 4 the first token goes out alone, then groups of 4,
// and the last message carries what is left; nothing is lost or reordered.
TEST_F(EngineTest, StreamIntervalGroupsTokensAndLosesNone) {
  const EngineRequest request = Greedy(Prompt(5, 3), 10);
  const Output alone = RunAlone(request);
  EngineOptions options;
  options.stream_interval = 4;
  auto engine = MakeEngine(options);
  auto stream = std::make_shared<RequestStream>(1000);
  ASSERT_TRUE(engine->Submit(request, stream).ok());
  Output out;
  RunUntilDone(*engine, {{stream.get(), &out}});
  EXPECT_EQ(out.message_tokens, (std::vector<size_t>{1, 4, 4, 1}));
  EXPECT_EQ(out.ids, alone.ids);
  EXPECT_EQ(out.text, alone.text);
  EXPECT_EQ(out.logprobs.size(), alone.logprobs.size());
  EXPECT_EQ(out.last.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out.last.completion_tokens, 10);
}

// A request that fails mid-interval still delivers the tokens it generated,
// before its error.
TEST_F(EngineTest, StreamIntervalDeliversHeldTokensBeforeAnError) {
  EngineOptions options;
  options.stream_interval = 100;
  auto engine = MakeEngine(options);
  auto stream = std::make_shared<RequestStream>(1000);
  EngineRequest request = Greedy(Prompt(4, 0), 1000);
  request.deadline = clock_.Now() + absl::Seconds(1);
  ASSERT_TRUE(engine->Submit(request, stream).ok());
  for (int i = 0; i < 6; ++i) engine->RunOnce();
  clock_.Advance(absl::Seconds(2));
  engine->RunOnce();
  Output out;
  Read(*stream, &out);
  // The first token, the held ones, then the error.
  ASSERT_EQ(out.message_tokens.size(), 3u);
  EXPECT_EQ(out.message_tokens[0], 1u);
  EXPECT_GT(out.message_tokens[1], 1u);
  EXPECT_EQ(out.message_tokens[2], 0u);
  ASSERT_TRUE(out.done);
  EXPECT_EQ(out.last.status.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(EngineTest, CappedDecodeStepsServeNewcomersFirstAndRotateTheRest) {
  std::vector<EngineRequest> old_requests;
  for (int i = 0; i < 3; ++i) old_requests.push_back(Greedy(Prompt(5, 20 + i), 40));
  const EngineRequest newcomer = Greedy(Prompt(7, 3), 4);
  const Output old_alone = RunAlone(old_requests[0]);
  const Output newcomer_alone = RunAlone(newcomer);
  StepLog log;
  EngineOptions options;
  options.max_decode_rows = 2;
  auto engine = MakeEngine(options, &log);
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<Output> outs(3);
  for (const auto& request : old_requests) {
    streams.push_back(std::make_shared<RequestStream>(1000));
    ASSERT_TRUE(engine->Submit(request, streams.back()).ok());
  }
  for (int i = 0; i < 12; ++i) engine->RunOnce();
  for (int i = 0; i < 3; ++i) Read(*streams[i], &outs[i]);
  // Three ready sequences, two rows per step: they take turns.
  size_t fewest = 1000, most = 0;
  for (const Output& out : outs) {
    fewest = std::min(fewest, out.ids.size());
    most = std::max(most, out.ids.size());
  }
  EXPECT_GE(fewest, 5u);
  EXPECT_LE(most - fewest, 1u);
  // A newcomer is prefilled at the next iteration and then decoded in every
  // step until it is done, ahead of the sequences that have more tokens.
  auto fresh = std::make_shared<RequestStream>(1000);
  ASSERT_TRUE(engine->Submit(newcomer, fresh).ok());
  Output fresh_out;
  for (int i = 0; i < 4 && !fresh_out.done; ++i) {
    engine->RunOnce();
    Read(*fresh, &fresh_out);
  }
  EXPECT_TRUE(fresh_out.done);
  EXPECT_EQ(fresh_out.ids, newcomer_alone.ids);
  for (int64_t rows : log.decode_rows) EXPECT_LE(rows, 2);
  // Waiting their turn changes nothing in what the others generate.
  RunUntilDone(*engine, {{streams[0].get(), &outs[0]}});
  EXPECT_EQ(outs[0].ids, old_alone.ids);
}

TEST_F(EngineTest, LongPromptDelaysRunningStreamsByOneChunkPerIteration) {
  EngineOptions options;
  options.prefill_chunk = 8;
  auto engine = MakeEngine(options);
  auto running = std::make_shared<RequestStream>(1000);
  ASSERT_TRUE(engine->Submit(Greedy(Prompt(3, 0), 200), running).ok());
  for (int i = 0; i < 2; ++i) engine->RunOnce();
  Output out_running;
  Read(*running, &out_running);
  auto long_prompt = std::make_shared<RequestStream>(1000);
  ASSERT_TRUE(engine->Submit(Greedy(Prompt(64, 3), 4), long_prompt).ok());
  Output out_long;
  for (int i = 0; i < 8; ++i) {  // 64 prompt tokens in chunks of 8
    const size_t before = out_running.ids.size();
    engine->RunOnce();
    Read(*running, &out_running);
    Read(*long_prompt, &out_long);
    EXPECT_EQ(out_running.ids.size(), before + 1) << "iteration " << i;
  }
  EXPECT_EQ(out_long.ids.size(), 2u);  // first token after the last chunk, then a decode step
}

TEST_F(EngineTest, PromptsOfOneLengthArePrefilledTogetherWithinTheChunkBudget) {
  std::vector<EngineRequest> requests;
  std::vector<Output> alone;
  for (int i = 0; i < 5; ++i) {
    requests.push_back(Greedy(Prompt(12, 40 + i), 6));
    alone.push_back(RunAlone(requests.back()));
  }
  EngineOptions options;
  options.prefill_chunk = 40;  // room for 3 prompts of 12 tokens per prefill
  StepLog log;
  auto engine = MakeEngine(options, &log);
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<Output> outs(5);
  std::vector<std::pair<RequestStream*, Output*>> pairs;
  for (int i = 0; i < 5; ++i) {
    streams.push_back(std::make_shared<RequestStream>(1000));
    ASSERT_TRUE(engine->Submit(requests[i], streams.back()).ok());
    pairs.push_back({streams.back().get(), &outs[i]});
  }
  RunUntilDone(*engine, pairs);
  EXPECT_EQ(log.prefill_rows, (std::vector<int64_t>{3, 2}));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(outs[i].ids, alone[i].ids) << i;
}

TEST_F(EngineTest, ScoreEqualsTheParallelForm) {
  for (MixerKind kind : {MixerKind::kAftConv, MixerKind::kLinearElu, MixerKind::kMha}) {
    SCOPED_TRACE(MixerKindName(kind));
    EngineOptions options;
    options.prefill_chunk = 16;  // several chunks, the last one partial
    auto engine = MakeEngine(options, nullptr, kind);
    const std::vector<int64_t> text = Prompt(41, 4);
    EngineRequest request;
    request.kind = EngineRequest::Kind::kScore;
    request.prompt = text;
    auto stream = std::make_shared<RequestStream>(1000);
    ASSERT_TRUE(engine->Submit(request, stream).ok());
    Output out;
    RunUntilDone(*engine, {{stream.get(), &out}});
    ASSERT_EQ(out.logprobs.size(), text.size());
    EXPECT_EQ(out.ids, text);
    torch::InferenceMode guard;
    torch::Tensor logits = model_->forward(torch::tensor(text).view({1, -1}))[0];
    torch::Tensor log_probs = torch::log_softmax(logits, -1);
    EXPECT_EQ(out.logprobs[0], 0.0f);
    for (size_t i = 1; i < text.size(); ++i) {
      EXPECT_NEAR(out.logprobs[i], log_probs[i - 1][text[i]].item<float>(), 1e-5) << i;
    }
  }
}

// A prompt of several chunks: the earlier ones return no logits and the last
// one only its last position's (PrefillLogits), yet greedy decoding after it
// equals the parallel form run on the whole growing text.
TEST_F(EngineTest, GreedyAfterAChunkedPromptEqualsTheParallelForm) {
  for (MixerKind kind : {MixerKind::kAftConv, MixerKind::kLinearElu, MixerKind::kMha}) {
    SCOPED_TRACE(MixerKindName(kind));
    EngineOptions options;
    options.prefill_chunk = 8;  // 29 tokens: three full chunks and a partial one
    auto engine = MakeEngine(options, nullptr, kind);
    const std::vector<int64_t> prompt = Prompt(29, 6);
    auto stream = std::make_shared<RequestStream>(1000);
    ASSERT_TRUE(engine->Submit(Greedy(prompt, 5), stream).ok());
    Output out;
    RunUntilDone(*engine, {{stream.get(), &out}});
    torch::InferenceMode guard;
    std::vector<int64_t> text = prompt, expected;
    for (int i = 0; i < 5; ++i) {
      torch::Tensor logits = model_->forward(torch::tensor(text).view({1, -1}))[0];
      expected.push_back(logits[-1].argmax().item<int64_t>());
      text.push_back(expected.back());
    }
    EXPECT_EQ(out.ids, expected);
  }
}

TEST_F(EngineTest, SeededSamplingDoesNotDependOnTheBatch) {
  EngineRequest sampled = Greedy(Prompt(5, 1), 16);
  sampled.sampling.temperature = 0.9;
  sampled.sampling.top_k = 50;
  sampled.sampling.seed = 1234;
  const Output alone = RunAlone(sampled);

  auto engine = MakeEngine();
  std::vector<std::shared_ptr<RequestStream>> others;
  for (int i = 0; i < 3; ++i) {
    EngineRequest other = sampled;
    other.prompt = Prompt(3 + i, 20 + i);
    other.sampling.seed = 99 + i;
    others.push_back(std::make_shared<RequestStream>(1000));
    ASSERT_TRUE(engine->Submit(other, others.back()).ok());
  }
  engine->RunOnce();
  auto stream = std::make_shared<RequestStream>(1000);
  ASSERT_TRUE(engine->Submit(sampled, stream).ok());
  Output out;
  RunUntilDone(*engine, {{stream.get(), &out}});
  EXPECT_EQ(out.ids, alone.ids);
}

TEST_F(EngineTest, DrainRefusesNewWorkAndStopEndsWhatIsLeft) {
  auto engine = MakeEngine();
  auto running = std::make_shared<RequestStream>(1000);
  ASSERT_TRUE(engine->Submit(Greedy(Prompt(3, 0), 1000), running).ok());
  engine->RunOnce();
  engine->Drain();
  auto late = std::make_shared<RequestStream>(1000);
  EXPECT_EQ(engine->Submit(Greedy(Prompt(3, 0), 5), late).code(), absl::StatusCode::kUnavailable);
  engine->Stop(absl::UnavailableError("stopping"));
  Output out;
  Read(*running, &out);
  ASSERT_TRUE(out.done);
  EXPECT_EQ(out.last.status.code(), absl::StatusCode::kUnavailable);
}

// Start() runs the model on a scratch slot before it returns, so that the
// first request does not pay for packing weights and starting threads; the
// slot comes back, no step is reported, and a request afterwards (on that
// very slot) gives what it gives on an engine that never warmed up.
TEST_F(EngineTest, StartWarmsUpOnAScratchSlotAndLeavesNoTrace) {
  const EngineRequest request = Greedy(Prompt(7, 3), 10);
  const Output alone = RunAlone(request);

  StepLog log;
  EngineOptions options;
  options.max_active = 1;
  auto engine = MakeEngine(options, &log);
  EXPECT_EQ(engine->warm_up().tokens, 0);
  engine->Start();
  EXPECT_EQ(engine->warm_up().tokens, 16 + 2);  // a 16-token prompt, 2 decode steps
  EXPECT_GT(engine->warm_up().time, absl::ZeroDuration());
  EXPECT_TRUE(log.prefill_rows.empty());
  EXPECT_TRUE(log.decode_rows.empty());
  EXPECT_EQ(engine->load().running, 0);

  auto stream = std::make_shared<RequestStream>(1000);
  ASSERT_TRUE(engine->Submit(request, stream).ok());
  Output out;
  ReadUntilDone(*stream, &out, absl::Seconds(60));
  engine->Stop();
  ASSERT_TRUE(out.done);
  EXPECT_TRUE(out.last.status.ok()) << out.last.status;
  EXPECT_EQ(out.ids, alone.ids);
  ASSERT_EQ(out.logprobs.size(), alone.logprobs.size());
  for (size_t i = 0; i < out.logprobs.size(); ++i) {
    EXPECT_NEAR(out.logprobs[i], alone.logprobs[i], 1e-5);
  }
}

TEST_F(EngineTest, WarmUpPromptFitsThePrefillChunk) {
  EngineOptions options;
  options.prefill_chunk = 4;
  auto engine = MakeEngine(options, nullptr, MixerKind::kMha);
  engine->Start();
  EXPECT_EQ(engine->warm_up().tokens, 4 + 2);
  engine->Stop();
}

// Ids of this process's threads named like the engine thread: the engine
// thread and the threads it started, which inherit its name. Those are its
// OpenMP workers, and the workers of LibTorch's own thread pool, which some
// operators start and which then live as long as the process.
std::set<std::string> EngineNamedThreads() {
  std::set<std::string> ids;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return ids;
  while (const dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + entry->d_name + "/comm");
    std::string name;
    std::getline(comm, name);
    if (name == "attn-engine") ids.insert(entry->d_name);
  }
  closedir(tasks);
  return ids;
}

// The ids in `a` and not in `b`.
std::set<std::string> Minus(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::set<std::string> difference;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(),
                      std::inserter(difference, difference.begin()));
  return difference;
}

// Those of `running` that have ended, once any has or `wait` passed: a
// released team's workers leave after the release returns, later still on
// a loaded machine.
std::set<std::string> EndedThreads(const std::set<std::string>& running, absl::Duration wait) {
  const absl::Time deadline = absl::Now() + wait;
  std::set<std::string> ended = Minus(running, EngineNamedThreads());
  while (ended.empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
    ended = Minus(running, EngineNamedThreads());
  }
  return ended;
}

// An engine that has nothing to do hands its OpenMP workers back, so that
// with several models hosted the idle engines do not slow the busy one; the
// next request builds a new team and gives the same output.
TEST_F(EngineTest, IdleEngineReleasesItsIntraOpThreads) {
  const int threads_before = at::get_num_threads();
  at::set_num_threads(2);
  // Wide enough that a prompt's prefill runs parallel loops (the tiny
  // model's are too small to fork).
  LmConfig config = TinyConfig(MixerKind::kAftConv);
  config.d_model = 256;
  config.layers = 1;
  config.ff_hidden = 1024;
  torch::manual_seed(3);
  CausalLm wide(config);
  wide->eval();
  auto engine = EngineFor(wide);
  engine->Start();
  const EngineRequest request = Greedy(Prompt(200, 5), 40);
  std::vector<Output> outputs(2);
  std::vector<std::set<std::string>> running(2);
  absl::Mutex running_mu;
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto stream = std::make_shared<RequestStream>(1000);
    const int64_t released = engine->load().teams_released;
    // Samples the engine's threads at every token the request produces,
    // listening before the request is submitted: on a loaded machine the
    // whole request may run before a late listener is set.
    const auto sample = [&] {
      const auto names = EngineNamedThreads();
      absl::MutexLock lock(&running_mu);
      running[i].insert(names.begin(), names.end());
    };
    ReadUntilDone(*stream, &outputs[i], absl::Seconds(60), sample,
                  [&] { EXPECT_TRUE(engine->Submit(request, stream).ok()); });
    ASSERT_TRUE(outputs[i].done);
    EXPECT_TRUE(outputs[i].last.status.ok()) << outputs[i].last.status;
    // The engine hands its team back after about 20 ms without work.
    ASSERT_TRUE(engine->AwaitLoad([&](const EngineLoad& l) { return l.teams_released > released; },
                                  absl::Now() + absl::Seconds(5)))
        << "request " << i << ": the engine did not release its team within 5 s of idling";
    const std::set<std::string> ended = EndedThreads(running[i], absl::Seconds(5));
    EXPECT_FALSE(ended.empty()) << "request " << i << ": the idle engine kept all "
                                << running[i].size() << " of its threads";
  }
  engine->Stop();
  at::set_num_threads(threads_before);
  EXPECT_FALSE(Minus(running[1], running[0]).empty())
      << "the second request ran without a new team";
  EXPECT_EQ(outputs[1].ids, outputs[0].ids);
  EXPECT_EQ(outputs[0].ids.size(), 40u);
}

// A request reserves its state at its longest context; one that does not fit
// the budget waits for room (first come, first served), one that never can
// is refused, and the outputs are those of each request run alone.
TEST_F(EngineTest, StateBudgetMakesRequestsWaitAndRefusesWhatCanNeverFit) {
  const EngineRequest a = Greedy(Prompt(10, 0), 20);
  const EngineRequest b = Greedy(Prompt(10, 5), 20);
  EngineOptions options;
  auto engine = MakeEngine(options, nullptr, MixerKind::kMha);
  const int64_t one = model_->state_bytes_per_sequence(30);  // prompt + max_tokens
  const Output a_alone = RunAlone(a, MixerKind::kMha);
  const Output b_alone = RunAlone(b, MixerKind::kMha);

  options.max_state_bytes = one + one / 2;  // room for one request at a time
  engine = MakeEngine(options, nullptr, MixerKind::kMha);
  EXPECT_EQ(engine->state_budget_bytes(), one + one / 2);
  auto too_big = std::make_shared<RequestStream>(1000);
  absl::Status refused = engine->Submit(Greedy(Prompt(10, 1), 40), too_big);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(refused.message()).find("--max_state_bytes"), std::string::npos);

  auto sa = std::make_shared<RequestStream>(1000), sb = std::make_shared<RequestStream>(1000);
  ASSERT_TRUE(engine->Submit(a, sa).ok());
  ASSERT_TRUE(engine->Submit(b, sb).ok());
  engine->RunOnce();
  EXPECT_EQ(engine->load().running, 1);
  EXPECT_EQ(engine->load().waiting, 1);
  Output out_a, out_b;
  RunUntilDone(*engine, {{sa.get(), &out_a}, {sb.get(), &out_b}});
  EXPECT_EQ(out_a.ids, a_alone.ids);
  EXPECT_EQ(out_b.ids, b_alone.ids);
  EXPECT_EQ(engine->load().running, 0);
}

// --prefill_chunk=0 (its default) sizes the chunk by device; a value
// given is kept whatever the device.
TEST(EngineOptionsTest, PrefillChunkDefaultsByDevice) {
  EXPECT_EQ(PrefillChunkFor(0, "cpu"), kCpuPrefillChunk);
  EXPECT_EQ(PrefillChunkFor(0, "cuda"), kGpuPrefillChunk);
  EXPECT_EQ(PrefillChunkFor(0, "cuda:1"), kGpuPrefillChunk);
  EXPECT_EQ(PrefillChunkFor(64, "cuda:0"), 64);
  EXPECT_EQ(PrefillChunkFor(512, "cpu"), 512);
  EXPECT_EQ(PrefillChunkFor(-1, "cuda"), -1) << "left for Validate to refuse";
  EXPECT_EQ(EngineOptions().prefill_chunk, kCpuPrefillChunk);
  EXPECT_GT(kGpuPrefillChunk, kCpuPrefillChunk);
}

}  // namespace
}  // namespace attn::serving
