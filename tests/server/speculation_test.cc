// Speculative decoding (server/engine/speculation.cc): n-gram drafts, and an
// engine that checks them gives plain decoding's tokens, log-probabilities,
// ends and final state, with tiny random models.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "model/backend/native_backend.h"
#include "server/core/model_registry.h"
#include "server/engine/engine.h"
#include "server/engine/ngram_draft.h"
#include "tests/server/fake_clock.h"
#include "tests/server/requests.h"
#include "tests/test_util.h"
#include "tests/tiny_model.h"

namespace attn::serving {
namespace {

using attn::testing::TinyModel;
using attn::testing::TinyTokenizer;

TEST(NgramDraft, ContinuesTheLatestEarlierOccurrenceOfTheLongestSuffix) {
  // History 1 2 3 4 | 9 2 3 5 | 1 2 3: "1 2 3" occurred at the start and is
  // followed by 4 9 2 ...; "2 3" alone occurs later (followed by 5).
  const std::vector<int64_t> prompt = {1, 2, 3, 4, 9, 2, 3, 5};
  const std::vector<int64_t> output = {1, 2, 3};
  EXPECT_EQ(NgramDraft(prompt, output, 3), (std::vector<int64_t>{4, 9, 2}));
  // Past the history's end the draft copies itself: history + draft repeats
  // what followed the match.
  EXPECT_EQ(NgramDraft(prompt, output, 10), (std::vector<int64_t>{4, 9, 2, 3, 5, 1, 2, 3, 4, 9}));
  // With only "2 3" to match, the latest occurrence wins.
  EXPECT_EQ(NgramDraft({7, 2, 3, 4, 8, 2, 3, 5}, {6, 2, 3}, 2), (std::vector<int64_t>{5, 6}));
  // A repeating output matches itself (the occurrence may overlap the suffix).
  EXPECT_EQ(NgramDraft({}, {5, 5, 5}, 4), (std::vector<int64_t>{5, 5, 5, 5}));
  EXPECT_EQ(NgramDraft({1, 2, 7}, {1, 2}, 5), (std::vector<int64_t>{7, 1, 2, 7, 1}));
}

TEST(NgramDraft, NothingWithoutAnEarlierOccurrence) {
  EXPECT_TRUE(NgramDraft({1, 2, 3}, {4}, 4).empty());
  EXPECT_TRUE(NgramDraft({1}, {}, 4).empty());
  EXPECT_TRUE(NgramDraft({}, {}, 4).empty());
  EXPECT_TRUE(NgramDraft({1, 2, 1, 2}, {}, 0).empty());
  // A single repeated token is too short a match.
  EXPECT_TRUE(NgramDraft({1, 9, 2, 9}, {}, 4).empty());
}

class DraftCounts : public EngineObserver {
 public:
  // An iteration's check reports its step, then each of its rounds.
  void OnStep(Phase, absl::Duration, int64_t, int64_t) override { rounds_since_step_ = 0; }
  void OnSpeculation(int64_t drafted, int64_t accepted) override {
    ++rounds;
    this->drafted += drafted;
    this->accepted += accepted;
    if (++rounds_since_step_ == 2) ++batched_checks;
  }
  // batched_checks: iterations that checked the drafts of several streams.
  int64_t rounds = 0, drafted = 0, accepted = 0, batched_checks = 0;

 private:
  int64_t rounds_since_step_ = 0;
};

struct Generated {
  std::vector<int64_t> ids;
  std::vector<float> logprobs;
  std::string text;
  StreamEvent last;
};

// `request` alone on a fresh engine over `model`, to its end; drafting with
// `draft_model` too if not null.
Generated GenerateAlone(CausalLm model, const EngineRequest& request, Speculation speculation,
                        DraftCounts* rounds = nullptr, int64_t draft_tokens = 8,
                        std::shared_ptr<LmBackend> draft_model = nullptr) {
  attn::testing::FakeClock clock;
  EngineOptions options;
  options.speculative = speculation;
  options.draft_tokens = draft_tokens;
  options.draft_model = std::move(draft_model);
  options.state_cache_bytes = 0;  // each run computes everything
  Engine engine(model, TinyTokenizer(), options, clock, rounds);
  auto stream = std::make_shared<RequestStream>(100000);
  EXPECT_TRUE(engine.Submit(request, stream).ok());
  Generated run;
  for (int i = 0; i < 5000 && !run.last.last; ++i) {
    engine.RunOnce();
    for (StreamEvent& event : stream->PopReady()) {
      run.ids.insert(run.ids.end(), event.token_ids.begin(), event.token_ids.end());
      run.logprobs.insert(run.logprobs.end(), event.logprobs.begin(), event.logprobs.end());
      run.text += event.text;
      if (event.last) run.last = std::move(event);
    }
  }
  EXPECT_TRUE(run.last.last) << "did not finish";
  return run;
}

// A prompt that quotes itself: a run of 24 ids, 8 others, the run again.
std::vector<int64_t> QuotingPrompt(int64_t offset) {
  std::vector<int64_t> prompt = testing::SyntheticIds(24, offset);
  const std::vector<int64_t> other = testing::SyntheticIds(8, offset + 101);
  prompt.insert(prompt.end(), other.begin(), other.end());
  const std::vector<int64_t> again = testing::SyntheticIds(20, offset);
  prompt.insert(prompt.end(), again.begin(), again.end());
  return prompt;
}

void ExpectSameOutput(const Generated& plain, const Generated& speculative) {
  ASSERT_EQ(speculative.ids, plain.ids);
  EXPECT_EQ(speculative.text, plain.text);
  ASSERT_EQ(speculative.logprobs.size(), plain.logprobs.size());
  for (size_t i = 0; i < plain.logprobs.size(); ++i) {
    EXPECT_NEAR(speculative.logprobs[i], plain.logprobs[i], 1e-4) << "token " << i;
  }
  EXPECT_EQ(speculative.last.finish_reason, plain.last.finish_reason);
  EXPECT_EQ(speculative.last.completion_tokens, plain.last.completion_tokens);
}

class SpeculationTest : public ::testing::TestWithParam<MixerKind> {};

// Greedy tokens, log-probabilities and ends equal plain decoding's over
// prompts that quote themselves, with drafts taken.
TEST_P(SpeculationTest, GreedyOutputEqualsPlainDecoding) {
  torch::InferenceMode guard;
  CausalLm model = TinyModel(GetParam());
  DraftCounts rounds;
  for (int64_t offset : {0, 5, 11, 40}) {
    SCOPED_TRACE(offset);
    const EngineRequest request = testing::GreedyEngineRequest(QuotingPrompt(offset), 60);
    const Generated plain = GenerateAlone(model, request, Speculation::kOff);
    ExpectSameOutput(plain, GenerateAlone(model, request, Speculation::kNgram, &rounds));
    ExpectSameOutput(plain, GenerateAlone(model, request, Speculation::kNgram, nullptr, 1));
  }
  EXPECT_GT(rounds.accepted, 0);
}

// max_tokens and a stop token inside a round end the output where plain
// decoding ends it; the state returned then is plain decoding's, so rolling
// back past drafts not taken is exact.
TEST_P(SpeculationTest, EndsAndReturnedStateEqualPlainDecoding) {
  torch::InferenceMode guard;
  CausalLm model = TinyModel(GetParam());
  EngineRequest request = testing::GreedyEngineRequest(QuotingPrompt(3), 40);
  request.return_state = true;
  DraftCounts rounds;
  const Generated full = GenerateAlone(model, request, Speculation::kOff);
  ASSERT_EQ(full.ids.size(), 40u);
  for (int64_t max_tokens : {1, 2, 3, 7, 19, 40}) {
    SCOPED_TRACE(max_tokens);
    EngineRequest shorter = request;
    shorter.max_tokens = max_tokens;
    const Generated plain = GenerateAlone(model, shorter, Speculation::kOff);
    const Generated speculative = GenerateAlone(model, shorter, Speculation::kNgram, &rounds);
    ExpectSameOutput(plain, speculative);
    ASSERT_NE(plain.last.state, nullptr);
    ASSERT_NE(speculative.last.state, nullptr);
    EXPECT_EQ(speculative.last.state_tokens, plain.last.state_tokens);
    EXPECT_EQ(speculative.last.state_token_ids, plain.last.state_token_ids);
    const auto& a = plain.last.state->tensors;
    const auto& b = speculative.last.state->tensors;
    ASSERT_EQ(a.size(), b.size());
    for (size_t t = 0; t < a.size(); ++t) {
      EXPECT_TRUE(torch::allclose(a[t].to(torch::kDouble), b[t].to(torch::kDouble), 1e-4, 1e-5))
          << "state tensor " << t;
    }
  }
  // A stop token met in the middle of a round.
  EngineRequest stopped = request;
  stopped.stop_token_ids = {full.ids[12]};
  stopped.ignore_eos = false;  // which stop tokens obey too
  const Generated plain = GenerateAlone(model, stopped, Speculation::kOff);
  ExpectSameOutput(plain, GenerateAlone(model, stopped, Speculation::kNgram));
  EXPECT_LE(plain.ids.size(), 13u);
  // Drafts past an end, or not taken, were thrown away: the states above
  // came through rollbacks.
  EXPECT_LT(rounds.accepted, rounds.drafted);
}

// A draft model that counts the tokens it is fed, and whose steps fail
// when asked to.
class CountingBackend : public LmBackend {
 public:
  CountingBackend(CausalLm model, bool fail_steps)
      : inner_(std::move(model)), fail_steps_(fail_steps) {}
  BackendKind kind() const override { return inner_.kind(); }
  torch::Device device() const override { return inner_.device(); }
  int64_t vocab_size() const override { return inner_.vocab_size(); }
  int64_t max_context() const override { return inner_.max_context(); }
  int64_t state_bytes_per_sequence(int64_t context) const override {
    return inner_.state_bytes_per_sequence(context);
  }
  absl::Status AllocateRows(int64_t rows) override { return inner_.AllocateRows(rows); }
  int64_t rows() const override { return inner_.rows(); }
  int64_t bytes_per_row() const override { return inner_.bytes_per_row(); }
  absl::Status ResetRow(int64_t row) override { return inner_.ResetRow(row); }
  absl::Status ReleaseRow(int64_t row) override { return inner_.ReleaseRow(row); }
  absl::StatusOr<SavedRow> SaveRow(int64_t row) override { return inner_.SaveRow(row); }
  absl::Status LoadRow(int64_t row, const SavedRow& saved) override {
    return inner_.LoadRow(row, saved);
  }
  absl::StatusOr<torch::Tensor> Prefill(const torch::Tensor& tokens, const torch::Tensor& rows,
                                        PrefillLogits logits) override {
    ++prefills;
    prefilled_tokens += tokens.numel();
    return inner_.Prefill(tokens, rows, logits);
  }
  absl::StatusOr<torch::Tensor> Step(const torch::Tensor& tokens,
                                     const torch::Tensor& rows) override {
    ++steps;
    if (fail_steps_) return absl::InternalError("step failed on purpose");
    return inner_.Step(tokens, rows);
  }
  int64_t prefills = 0, prefilled_tokens = 0, steps = 0;

 private:
  NativeBackend inner_;
  const bool fail_steps_;
};

std::shared_ptr<LmBackend> DraftBackend(MixerKind kind, uint64_t seed = 7) {
  return std::make_shared<NativeBackend>(TinyModel(kind, seed));
}

// A draft model, the served model's twin or another one, leaves greedy and
// seeded output and the returned state as plain decoding's, on prompts that
// do not quote themselves (n-gram lookup finds nothing there). The twin's
// drafts are taken but for near-ties and ends.
TEST_P(SpeculationTest, DraftModelKeepsPlainOutput) {
  torch::InferenceMode guard;
  CausalLm model = TinyModel(GetParam());
  DraftCounts twin, other;
  for (int64_t offset : {0, 9, 23}) {
    SCOPED_TRACE(offset);
    EngineRequest request = testing::GreedyEngineRequest(testing::SyntheticIds(30, offset), 45);
    request.return_state = true;
    const Generated plain = GenerateAlone(model, request, Speculation::kOff);
    // Each draft model's row catches up by what the sequence added since
    // the last round: each token of the prompt and the output is fed by a
    // prefill once at most (drafts it stepped through and that were kept
    // are not fed again; those that were not are dropped by a rollback).
    auto own = std::make_shared<CountingBackend>(TinyModel(GetParam()), false);
    const Generated drafted = GenerateAlone(model, request, Speculation::kOff, &twin, 6, own);
    ExpectSameOutput(plain, drafted);
    ASSERT_NE(drafted.last.state, nullptr);
    for (size_t t = 0; t < plain.last.state->tensors.size(); ++t) {
      EXPECT_TRUE(torch::allclose(plain.last.state->tensors[t].to(torch::kDouble),
                                  drafted.last.state->tensors[t].to(torch::kDouble), 1e-4, 1e-5))
          << "state tensor " << t;
    }
    auto another = std::make_shared<CountingBackend>(TinyModel(MixerKind::kAftDecay, 3), false);
    ExpectSameOutput(plain, GenerateAlone(model, request, Speculation::kNgram, &other, 5, another));
    for (const auto* counted : {own.get(), another.get()}) {
      EXPECT_GT(counted->steps, 0);
      EXPECT_LE(counted->prefilled_tokens, 30 + 45);
    }
    request.sampling.temperature = 0.7;
    request.sampling.seed = static_cast<uint64_t>(offset) + 1;
    ExpectSameOutput(GenerateAlone(model, request, Speculation::kOff),
                     GenerateAlone(model, request, Speculation::kOff, &other, 4,
                                   DraftBackend(MixerKind::kRwkv7, 5)));
  }
  EXPECT_GT(twin.rounds, 0);
  EXPECT_GE(twin.accepted, twin.drafted * 8 / 10) << twin.drafted;
  EXPECT_GT(other.rounds, 0);
  EXPECT_LT(other.accepted, other.drafted);
}

// `requests` together on a fresh engine over `backend`, each to its end.
std::vector<Generated> RunTogether(std::unique_ptr<LmBackend> backend,
                                   attn::testing::FakeClock& clock,
                                   const std::vector<EngineRequest>& requests,
                                   Speculation speculation, DraftCounts* rounds = nullptr) {
  EngineOptions options;
  options.speculative = speculation;
  options.speculative_max_batch = static_cast<int64_t>(requests.size());
  options.state_cache_bytes = 0;
  Engine engine(std::move(backend), TinyTokenizer(), options, clock, rounds);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const EngineRequest& request : requests) {
    streams.push_back(std::make_shared<RequestStream>(100000));
    EXPECT_TRUE(engine.Submit(request, streams.back()).ok());
  }
  std::vector<Generated> runs(requests.size());
  const auto done = [&] {
    return std::all_of(runs.begin(), runs.end(), [](const Generated& g) { return g.last.last; });
  };
  for (int i = 0; i < 5000 && !done(); ++i) {
    engine.RunOnce();
    for (size_t r = 0; r < streams.size(); ++r) {
      for (StreamEvent& event : streams[r]->PopReady()) {
        Generated& run = runs[r];
        run.ids.insert(run.ids.end(), event.token_ids.begin(), event.token_ids.end());
        run.logprobs.insert(run.logprobs.end(), event.logprobs.begin(), event.logprobs.end());
        run.text += event.text;
        if (event.last) run.last = std::move(event);
      }
    }
  }
  EXPECT_TRUE(done()) << "did not finish";
  return runs;
}

std::vector<Generated> GenerateTogether(CausalLm model, const std::vector<EngineRequest>& requests,
                                        Speculation speculation, DraftCounts* rounds = nullptr) {
  attn::testing::FakeClock clock;
  return RunTogether(std::make_unique<NativeBackend>(model), clock, requests, speculation, rounds);
}

// Four streams of one batch, the first two at one length: greedy, seeded,
// the first prompt twice (whenever it drafts, its twin does too, at the
// same length), all quoting their prompts.
std::vector<EngineRequest> BatchRequests() {
  std::vector<EngineRequest> requests;
  for (int64_t offset : {0, 7, 19}) {
    std::vector<int64_t> prompt = testing::SyntheticIds(offset == 19 ? 5 : 1, 300 + offset);
    const std::vector<int64_t> quoting = QuotingPrompt(offset);
    prompt.insert(prompt.end(), quoting.begin(), quoting.end());
    requests.push_back(testing::GreedyEngineRequest(prompt, 40 + offset));
  }
  requests[1].sampling.temperature = 0.8;
  requests[1].sampling.seed = 5;
  requests.push_back(requests[0]);
  requests.back().max_tokens = 33;
  return requests;
}

// Streams decoding in one batch draft together: their drafts are checked in
// one prefill (rows grouped by length where the model places tokens by
// position), and each stream's output is what plain decoding of the same
// batch gives, greedy and seeded, with rows at different lengths and
// different draft lengths, and a round that ends its stream.
TEST_P(SpeculationTest, StreamsInOneBatchDraftTogether) {
  torch::InferenceMode guard;
  CausalLm model = TinyModel(GetParam());
  const std::vector<EngineRequest> requests = BatchRequests();
  DraftCounts rounds;
  const std::vector<Generated> plain = GenerateTogether(model, requests, Speculation::kOff);
  const std::vector<Generated> drafted =
      GenerateTogether(model, requests, Speculation::kNgram, &rounds);
  for (size_t r = 0; r < requests.size(); ++r) {
    SCOPED_TRACE(r);
    ExpectSameOutput(plain[r], drafted[r]);
  }
  EXPECT_GT(rounds.accepted, 0);
  EXPECT_GT(rounds.batched_checks, 0);
}

INSTANTIATE_TEST_SUITE_P(Mixers, SpeculationTest,
                         ::testing::Values(MixerKind::kLinearElu, MixerKind::kAftDecay,
                                           MixerKind::kRwkv7, MixerKind::kMamba2,
                                           MixerKind::kShortConv),
                         [](const auto& info) {
                           std::string name;  // letters and digits only
                           for (char c : std::string(MixerKindName(info.param))) {
                             if (std::isalnum(static_cast<unsigned char>(c))) name += c;
                           }
                           return name;
                         });

// Seeded sampling with drafts gives plain decoding's tokens: each emitted
// token is one draw from the same logits after the same tokens, so the
// sampler's generator advances as in plain decoding (a certain draft token
// is accepted exactly when the draw picks it: speculative sampling's rule).
TEST_P(SpeculationTest, SeededSamplingEqualsPlainDecoding) {
  torch::InferenceMode guard;
  CausalLm model = TinyModel(GetParam());
  DraftCounts rounds;
  for (uint64_t seed : {1, 2, 3, 4}) {
    SCOPED_TRACE(seed);
    EngineRequest request = testing::GreedyEngineRequest(QuotingPrompt(seed * 7), 50);
    request.sampling.temperature = seed % 2 ? 0.3 : 0.7;
    request.sampling.top_p = seed == 3 ? 0.9 : 1.0;
    request.sampling.top_k = seed == 4 ? 20 : 0;
    request.sampling.repetition_penalty = seed == 2 ? 1.1 : 1.0;
    request.sampling.seed = seed;
    const Generated plain = GenerateAlone(model, request, Speculation::kOff);
    ExpectSameOutput(plain, GenerateAlone(model, request, Speculation::kNgram, &rounds));
  }
  EXPECT_GT(rounds.accepted, 0);
  EXPECT_LT(rounds.accepted, rounds.drafted);
}

// A key/value cache drafts too, from n-gram lookup and from a draft model:
// a round's copy leaves its positions in the row, and a rollback sets the
// row's length back. Greedy output is plain decoding's, after rounds that
// threw drafts away.
TEST(Speculation, KeyValueCachesDraftAndRollBackByLength) {
  torch::InferenceMode guard;
  for (MixerKind kind : {MixerKind::kMha, MixerKind::kGqa}) {
    SCOPED_TRACE(MixerKindName(kind));
    CausalLm model = TinyModel(kind);
    DraftCounts rounds, modelled;
    for (int64_t offset : {0, 5, 11}) {
      const EngineRequest greedy = testing::GreedyEngineRequest(QuotingPrompt(offset), 40);
      const Generated plain = GenerateAlone(model, greedy, Speculation::kOff);
      ExpectSameOutput(plain, GenerateAlone(model, greedy, Speculation::kNgram, &rounds));
      ExpectSameOutput(plain, GenerateAlone(model, greedy, Speculation::kOff, &modelled, 4,
                                            DraftBackend(MixerKind::kRwkv7, 5)));
    }
    for (const DraftCounts* counts : {&rounds, &modelled}) {
      EXPECT_GT(counts->rounds, 0);
      EXPECT_LT(counts->accepted, counts->drafted);
    }
  }
}

// A model whose embedding is padded far past its tokenizer (as RWKV World
// models' 65,536 rows): the served model never chooses a padding id, so
// the draft model proposes none either, and its twin's drafts are taken.
TEST(Speculation, DraftModelProposesOnlyIdsTheTokenizerHas) {
  torch::InferenceMode guard;
  torch::manual_seed(11);
  CausalLm padded(
      attn::testing::SmallLmConfig(MixerKind::kRwkv7, 8 * TinyTokenizer().vocab_size()));
  {  // larger padding rows, which win the model's own argmax
    torch::NoGradGuard no_grad;
    for (auto& p : padded->named_parameters()) {
      if (p.key() == "head_weight" || p.key() == "embedding.weight") {
        p.value().narrow(0, TinyTokenizer().vocab_size(), 7 * TinyTokenizer().vocab_size()).mul_(4);
      }
    }
  }
  padded->eval();
  const EngineRequest greedy = testing::GreedyEngineRequest(testing::SyntheticIds(20, 2), 40);
  DraftCounts twin;
  ExpectSameOutput(GenerateAlone(padded, greedy, Speculation::kOff),
                   GenerateAlone(padded, greedy, Speculation::kOff, &twin, 8,
                                 std::make_shared<NativeBackend>(padded)));
  EXPECT_GT(twin.rounds, 0);
  EXPECT_GE(twin.accepted, twin.drafted * 8 / 10) << twin.drafted;
}

TEST(Speculation, AFailingDraftModelLeavesTheStreamToPlainDecoding) {
  torch::InferenceMode guard;
  const EngineRequest greedy = testing::GreedyEngineRequest(testing::SyntheticIds(20, 4), 30);
  auto failing = std::make_shared<CountingBackend>(TinyModel(MixerKind::kRwkv7), true);
  DraftCounts rounds;
  CausalLm model = TinyModel(MixerKind::kRwkv7);
  ExpectSameOutput(GenerateAlone(model, greedy, Speculation::kOff),
                   GenerateAlone(model, greedy, Speculation::kOff, &rounds, 8, failing));
  EXPECT_EQ(failing->prefills, 1);  // caught up once, then its first step failed
  EXPECT_EQ(failing->steps, 1);
  EXPECT_EQ(rounds.rounds, 0);
}

// A backend whose calls move a fake clock as a real model's would: a call
// costs `base` plus `per_token` for each token it feeds.
class TimedBackend : public CountingBackend {
 public:
  TimedBackend(CausalLm model, attn::testing::FakeClock& clock, double base_ms, double per_token_ms)
      : CountingBackend(std::move(model), false),
        clock_(clock),
        base_ms_(base_ms),
        per_token_ms_(per_token_ms) {}
  absl::StatusOr<torch::Tensor> Prefill(const torch::Tensor& tokens, const torch::Tensor& rows,
                                        PrefillLogits logits) override {
    Spend(tokens.numel());
    return CountingBackend::Prefill(tokens, rows, logits);
  }
  absl::StatusOr<torch::Tensor> Step(const torch::Tensor& tokens,
                                     const torch::Tensor& rows) override {
    Spend(tokens.numel());
    return CountingBackend::Step(tokens, rows);
  }

 private:
  void Spend(int64_t tokens) {
    clock_.Advance(absl::Microseconds(1000 * (base_ms_ + per_token_ms_ * tokens)));
  }
  attn::testing::FakeClock& clock_;
  const double base_ms_, per_token_ms_;
};

// The fake time `request` takes alone on an engine over a timed `model` (a
// step 10 ms, a prefill 9 ms and 1 ms a token), drafting with `draft`.
absl::Duration TimedRun(MixerKind kind, const EngineRequest& request,
                        std::shared_ptr<LmBackend> draft, DraftCounts* rounds,
                        attn::testing::FakeClock& clock) {
  EngineOptions options;
  options.draft_model = std::move(draft);
  options.state_cache_bytes = 0;
  Engine engine(std::make_unique<TimedBackend>(TinyModel(kind), clock, 9, 1), TinyTokenizer(),
                options, clock, rounds);
  auto stream = std::make_shared<RequestStream>(100000);
  EXPECT_TRUE(engine.Submit(request, stream).ok());
  const absl::Time start = clock.Now();
  bool last = false;
  for (int i = 0; i < 5000 && !last; ++i) {
    engine.RunOnce();
    for (StreamEvent& event : stream->PopReady()) last = last || event.last;
  }
  EXPECT_TRUE(last) << "did not finish";
  return clock.Now() - start;
}

// Plain decoding's fake time for `request` alone over its time drafting
// with a timed tiny RWKV-7 of seed `draft_seed` (7: the served model's
// twin) at about half a step's cost (a call 4.5 ms, 0.5 ms a token).
double DraftModelSpeedUp(const EngineRequest& request, uint64_t draft_seed, DraftCounts* counts) {
  attn::testing::FakeClock clock;
  const absl::Duration plain = TimedRun(MixerKind::kRwkv7, request, nullptr, nullptr, clock);
  const absl::Duration drafted = TimedRun(
      MixerKind::kRwkv7, request,
      std::make_shared<TimedBackend>(TinyModel(MixerKind::kRwkv7, draft_seed), clock, 4.5, 0.5),
      counts, clock);
  return absl::FDivDuration(plain, drafted);
}

// The pause rule holds a draft model that rarely agrees (another model's
// weights, at half a step's cost) to at least 0.95x plain decoding, and
// lets one that agrees (the served model's twin, as cheap) pay.
TEST(Speculation, ADraftModelThatDoesNotPayCostsAtMostFivePercent) {
  torch::InferenceMode guard;
  const EngineRequest greedy = testing::GreedyEngineRequest(testing::SyntheticIds(20, 4), 256);
  DraftCounts other;
  EXPECT_GE(DraftModelSpeedUp(greedy, 9, &other), 0.95) << other.rounds << " rounds";
  EXPECT_GT(other.rounds, 0);
  EXPECT_LT(other.accepted, other.drafted / 4) << other.drafted;
  DraftCounts twin;
  EXPECT_GE(DraftModelSpeedUp(greedy, 7, &twin), 1.3) << twin.accepted << " of " << twin.drafted;
}

// A draft model's catch-up on the prompt comes before any round can show
// that it agrees. For 300 prompt tokens and 128 to generate, feeding it the
// prompt would cost about a tenth of plain decoding (0.5 ms a token against
// 10 ms a step), so a draft model that never agrees is not asked at all;
// for 100 and 400 the answer can pay for it, and the served model's twin
// drafts and pays.
TEST(Speculation, ADraftModelCatchesUpOnlyWhereTheAnswerCanPayForIt) {
  torch::InferenceMode guard;
  DraftCounts other;
  EXPECT_GE(DraftModelSpeedUp(testing::GreedyEngineRequest(testing::SyntheticIds(300, 4), 128), 9,
                              &other),
            0.95);
  EXPECT_EQ(other.rounds, 0);
  DraftCounts twin;
  EXPECT_GE(
      DraftModelSpeedUp(testing::GreedyEngineRequest(testing::SyntheticIds(100, 4), 400), 7, &twin),
      1.3)
      << twin.accepted << " of " << twin.drafted;
  EXPECT_GT(twin.rounds, 0);
}

// The fake time `requests` take together on an engine over a timed tiny
// RWKV-7 (a call 9 ms and `per_token_ms` a token), and their outputs.
absl::Duration TimedBatch(const std::vector<EngineRequest>& requests, double per_token_ms,
                          Speculation speculation, std::vector<Generated>* runs,
                          DraftCounts* rounds = nullptr) {
  attn::testing::FakeClock clock;
  const absl::Time start = clock.Now();
  *runs = RunTogether(
      std::make_unique<TimedBackend>(TinyModel(MixerKind::kRwkv7), clock, 9, per_token_ms), clock,
      requests, speculation, rounds);
  return clock.Now() - start;
}

// In a batch, a stream that does not draft waits for the others' checks:
// where they cost more than plain steps (a token a third of a call here,
// and one stream sampled, which rarely drafts), drafting at that batch size
// pauses, and the batch takes at least 0.95x plain decoding's time
// throughout; where every stream drafts and checks are cheap (a tenth of a
// call per token), the rounds pay. The tokens are plain decoding's.
TEST(Speculation, ABatchWhoseChecksDoNotPayCostsAtMostFivePercent) {
  torch::InferenceMode guard;
  for (double per_token_ms : {3.0, 0.9}) {
    SCOPED_TRACE(per_token_ms);
    std::vector<EngineRequest> requests = BatchRequests();
    if (per_token_ms < 1) requests[1].sampling.temperature = 0;
    std::vector<Generated> plain, drafted;
    DraftCounts rounds;
    const absl::Duration plain_took = TimedBatch(requests, per_token_ms, Speculation::kOff, &plain);
    const absl::Duration drafted_took =
        TimedBatch(requests, per_token_ms, Speculation::kNgram, &drafted, &rounds);
    for (size_t r = 0; r < requests.size(); ++r) ExpectSameOutput(plain[r], drafted[r]);
    EXPECT_GT(rounds.batched_checks, 0);
    const double speedup = absl::FDivDuration(plain_took, drafted_took);
    EXPECT_GE(speedup, per_token_ms > 1 ? 0.95 : 1.2) << rounds.rounds << " rounds";
  }
}

// --draft_model: the package loads once, and each model with its vocabulary
// and a state that stops growing drafts with it; a name of no package, or a
// draft model whose state grows, stops the start naming the flag.
TEST(Speculation, DraftModelFlagLoadsItOnceForWhereItCanDraft) {
  torch::InferenceMode guard;
  attn::testing::ScopedTempDir dir("draft_model");
  attn::testing::WriteTinyPackage(dir.path().string(), "target", MixerKind::kRwkv7);
  attn::testing::WriteTinyPackage(dir.path().string(), "draft", MixerKind::kAftDecay, 3);
  attn::testing::WriteTinyPackage(dir.path().string(), "kv", MixerKind::kMha);
  RegistryOptions options;
  options.paths = {dir.path().string()};
  options.engine.max_active = 4;
  std::vector<std::string> lines;
  options.progress = [&](const std::string& line) { lines.push_back(line); };
  options.draft_model = "draft";
  absl::StatusOr<std::unique_ptr<ModelRegistry>> registry = ModelRegistry::Load(options, nullptr);
  ASSERT_TRUE(registry.ok()) << registry.status();
  const std::string log = absl::StrJoin(lines, "\n");
  EXPECT_TRUE(absl::StrContains(log, "  target drafts with draft")) << log;
  // A native key/value cache rolls back by length: its round copies little.
  EXPECT_TRUE(absl::StrContains(log, "  kv drafts with draft")) << log;
  EXPECT_FALSE(absl::StrContains(log, "  draft drafts")) << log;
  // One load of the draft package; its served copy and the drafters share it.
  EXPECT_EQ(
      std::count_if(lines.begin(), lines.end(),
                    [](const std::string& l) { return absl::StrContains(l, "(--draft_model)"); }),
      1)
      << log;
  registry->reset();
  // TorchScript's cache would be copied whole each round.
  options.model_backends["kv"] = BackendKind::kTorchScript;
  lines.clear();
  registry = ModelRegistry::Load(options, nullptr);
  ASSERT_TRUE(registry.ok()) << registry.status();
  EXPECT_TRUE(absl::StrContains(absl::StrJoin(lines, "\n"),
                                "  kv does not draft (a round's copy of its state grows with the "
                                "context) with draft"))
      << absl::StrJoin(lines, "\n");
  registry->reset();
  options.model_backends.clear();

  options.draft_model = "absent";
  absl::Status absent = ModelRegistry::Load(options, nullptr).status();
  EXPECT_EQ(absent.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(absent.message(), "--draft_model: absent names no package"))
      << absent;
  options.draft_model = "kv";
  absl::Status grows = ModelRegistry::Load(options, nullptr).status();
  EXPECT_EQ(grows.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(grows.message(), "--draft_model: kv's state grows")) << grows;
  // Refused before anything loads, even where no other model could draft.
  options.paths = {dir.File("kv.pt")};
  grows = ModelRegistry::Load(options, nullptr).status();
  EXPECT_TRUE(absl::StrContains(grows.message(), "--draft_model: kv's state grows")) << grows;
}

TEST(Speculation, FlagNamesParseAndOthersAreRefused) {
  Speculation speculation = Speculation::kOff;
  ASSERT_TRUE(ParseSpeculation("ngram", &speculation).ok());
  EXPECT_EQ(speculation, Speculation::kNgram);
  ASSERT_TRUE(ParseSpeculation("off", &speculation).ok());
  EXPECT_EQ(speculation, Speculation::kOff);
  const absl::Status bad = ParseSpeculation("draft", &speculation);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("speculative"), std::string::npos);
  EngineOptions options;
  options.draft_tokens = kMaxDraftTokens + 1;
  EXPECT_NE(options.Validate().message().find("draft_tokens"), std::string::npos);
  options.draft_tokens = 0;
  EXPECT_NE(options.Validate().message().find("draft_tokens"), std::string::npos);
  options.draft_tokens = 8;
  for (double share : {-0.01, kMaxDraftPrefillShare + 1, std::nan("")}) {
    options.draft_prefill_share = share;
    EXPECT_NE(options.Validate().message().find("draft_prefill_share"), std::string::npos) << share;
  }
  options.draft_prefill_share = 0;
  EXPECT_TRUE(options.Validate().ok());
}

}  // namespace
}  // namespace attn::serving
