// Speculative decoding (server/engine/speculation.cc): n-gram drafts, and an
// engine that checks them gives plain decoding's tokens, log-probabilities,
// ends and final state, with tiny random models.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cctype>
#include <memory>
#include <string>
#include <vector>

#include "server/engine/engine.h"
#include "server/engine/ngram_draft.h"
#include "tests/server/fake_clock.h"
#include "tests/server/requests.h"
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
  void OnSpeculation(int64_t drafted, int64_t accepted) override {
    ++rounds;
    this->drafted += drafted;
    this->accepted += accepted;
  }
  int64_t rounds = 0, drafted = 0, accepted = 0;
};

struct Generated {
  std::vector<int64_t> ids;
  std::vector<float> logprobs;
  std::string text;
  StreamEvent last;
};

// `request` alone on a fresh engine over `model`, to its end.
Generated GenerateAlone(CausalLm model, const EngineRequest& request, Speculation speculation,
                        DraftCounts* rounds = nullptr, int64_t draft_tokens = 8) {
  attn::testing::FakeClock clock;
  EngineOptions options;
  options.speculative = speculation;
  options.draft_tokens = draft_tokens;
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

INSTANTIATE_TEST_SUITE_P(Mixers, SpeculationTest,
                         ::testing::Values(MixerKind::kLinearElu, MixerKind::kAftDecay,
                                           MixerKind::kRwkv7, MixerKind::kMamba2),
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

// States that grow with the context (a key/value cache, which a rollback
// would copy whole) decode plainly.
TEST(Speculation, KeyValueCachesDoNotDraft) {
  torch::InferenceMode guard;
  const EngineRequest greedy = testing::GreedyEngineRequest(QuotingPrompt(0), 30);
  DraftCounts rounds;
  const Generated plain = GenerateAlone(TinyModel(MixerKind::kMha), greedy, Speculation::kOff);
  ExpectSameOutput(plain,
                   GenerateAlone(TinyModel(MixerKind::kMha), greedy, Speculation::kNgram, &rounds));
  EXPECT_EQ(rounds.rounds, 0);
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
}

}  // namespace
}  // namespace attn::serving
