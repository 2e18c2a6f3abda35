#include "model/lm/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

namespace attn {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, -1.0f, 2.5f};

SamplingOptions Greedy() {
  SamplingOptions options;
  options.temperature = 0.0;
  return options;
}

TEST(Sampler, GreedyTakesTheArgMaxAndReportsItsLogprob) {
  Sampler sampler(Greedy());
  auto token = sampler.Next(kLogits.data(), 5);
  EXPECT_EQ(token.id, 1);
  double total = 0;
  for (float l : kLogits) total += std::exp(static_cast<double>(l));
  // Float32 arithmetic, as Score's log_softmax.
  EXPECT_NEAR(token.logprob, 3.0 - std::log(total), 1e-6);
}

// OpenAI's logit_bias, presence and frequency penalties, as its docs define
// them: greedy choices move exactly where the adjusted logits say.
TEST(Sampler, LogitBiasAndPenaltiesMoveTheChoice) {
  SamplingOptions bias = Greedy();
  bias.logit_bias = {{3, 5.0f}};  // -1 + 5 = 4 beats 3
  EXPECT_EQ(Sampler(bias).Next(kLogits.data(), 5).id, 3);
  // Greedy with a presence penalty of 0.6: token 1 (3.0) is chosen, then
  // loses 0.6 (2.4 < 2.5): token 4 next; then 4 loses 0.6 (1.9), 1 is back
  // at 2.4.
  SamplingOptions presence = Greedy();
  presence.presence_penalty = 0.6;
  Sampler p(presence);
  EXPECT_EQ(p.Next(kLogits.data(), 5).id, 1);
  EXPECT_EQ(p.Next(kLogits.data(), 5).id, 4);
  EXPECT_EQ(p.Next(kLogits.data(), 5).id, 1);
  // A frequency penalty of 0.3 grows with each use: 1 (3.0, 2.7, 2.4) until
  // it falls under 4's 2.5 after two uses of 1 ... 2.4 < 2.5.
  SamplingOptions frequency = Greedy();
  frequency.frequency_penalty = 0.3;
  Sampler f(frequency);
  EXPECT_EQ(f.Next(kLogits.data(), 5).id, 1);
  EXPECT_EQ(f.Next(kLogits.data(), 5).id, 1);
  EXPECT_EQ(f.Next(kLogits.data(), 5).id, 4);
  // The reported logprob stays the model's own.
  SamplingOptions pushed = Greedy();
  pushed.logit_bias = {{0, 100.0f}};
  double total = 0;
  for (float l : kLogits) total += std::exp(static_cast<double>(l));
  EXPECT_NEAR(Sampler(pushed).Next(kLogits.data(), 5).logprob, 1.0 - std::log(total), 1e-6);
}

TEST(Sampler, TopLogprobsAreTheModelsMostLikelyTokens) {
  SamplingOptions options = Greedy();
  options.top_logprobs = 3;
  const SampledToken token = Sampler(options).Next(kLogits.data(), 5);
  double total = 0;
  for (float l : kLogits) total += std::exp(static_cast<double>(l));
  ASSERT_EQ(token.top.size(), 3u);
  const int64_t ids[] = {1, 4, 2};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(token.top[i].first, ids[i]);
    EXPECT_NEAR(token.top[i].second, kLogits[ids[i]] - std::log(total), 1e-6);
  }
}

TEST(Sampler, OutOfRangeOptionsAreNamed) {
  SamplingOptions o;
  o.presence_penalty = 2.5;
  EXPECT_NE(o.Validate().message().find("presence_penalty"), std::string::npos);
  o = SamplingOptions();
  o.frequency_penalty = -3;
  EXPECT_NE(o.Validate().message().find("frequency_penalty"), std::string::npos);
  o = SamplingOptions();
  o.logit_bias = {{7, 101.0f}};
  EXPECT_NE(o.Validate().message().find("logit_bias[7]"), std::string::npos);
  o = SamplingOptions();
  o.top_logprobs = kMaxTopLogprobs + 1;
  EXPECT_NE(o.Validate().message().find("top_logprobs"), std::string::npos);
}

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  SamplingOptions k1;
  k1.top_k = 1;
  SamplingOptions p_small;
  p_small.top_p = 1e-6;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    k1.seed = p_small.seed = seed;
    EXPECT_EQ(Sampler(k1).Next(kLogits.data(), 5).id, 1);
    EXPECT_EQ(Sampler(p_small).Next(kLogits.data(), 5).id, 1);
  }
}

TEST(Sampler, SameSeedSameDraws) {
  SamplingOptions options;
  options.seed = 1234;
  Sampler a(options), b(options);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(a.Next(kLogits.data(), 5).id, b.Next(kLogits.data(), 5).id);
  }
}

TEST(Sampler, DrawsFollowTheSoftmaxAndRespectTopK) {
  SamplingOptions options;
  options.seed = 7;
  options.top_k = 3;  // keeps ids 1, 4, 2
  Sampler sampler(options);
  std::map<int64_t, int> counts;
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) ++counts[sampler.Next(kLogits.data(), 5).id];
  EXPECT_EQ(counts.count(0) + counts.count(3), 0u);
  const double z = std::exp(3.0) + std::exp(2.5) + std::exp(2.0);
  EXPECT_NEAR(counts[1] / double(draws), std::exp(3.0) / z, 0.015);
  EXPECT_NEAR(counts[4] / double(draws), std::exp(2.5) / z, 0.015);
  EXPECT_NEAR(counts[2] / double(draws), std::exp(2.0) / z, 0.015);
}

// With no top_k or top_p the draw walks the ids in order, block by block
// (DrawFromAll): its frequencies must still be the softmax's, over a
// vocabulary of several blocks with a partial last block, whole blocks at
// -inf (a mask) and the mass spread over blocks far apart.
TEST(Sampler, DrawsFromAWholeVocabularyFollowTheSoftmax) {
  std::vector<float> logits(1000, -4.0f);
  for (int i = 256; i < 768; ++i) logits[i] = -std::numeric_limits<float>::infinity();
  logits[3] = 2.0f;
  logits[255] = 1.0f;
  logits[768] = 1.5f;
  logits[999] = 2.5f;
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  SamplingOptions options;
  options.seed = 11;
  Sampler sampler(options);
  std::map<int64_t, int> counts;
  const int draws = 40000;
  for (int i = 0; i < draws; ++i) ++counts[sampler.Next(logits.data(), 1000).id];
  for (int64_t id : {3, 255, 768, 999}) {
    const double p = std::exp(static_cast<double>(logits[id])) / z;
    EXPECT_NEAR(counts[id] / double(draws), p, 4 * std::sqrt(p * (1 - p) / draws)) << id;
  }
  int masked = 0, rest = 0;
  for (const auto& [id, count] : counts) {
    if (id >= 256 && id < 768) masked += count;
    if (id != 3 && id != 255 && id != 768 && id != 999 && (id < 256 || id >= 768)) rest += count;
  }
  EXPECT_EQ(masked, 0);
  const double p_rest = 484 * std::exp(-4.0) / z;
  EXPECT_NEAR(rest / double(draws), p_rest, 4 * std::sqrt(p_rest * (1 - p_rest) / draws));
}

// top_p alone sorts only the most likely ids, as many as its prefix needs
// (256, else 4,096): a nucleus of a few hundred ids, scattered over the
// vocabulary, must still be exactly the full sort's prefix, drawn in
// proportion to the softmax.
TEST(Sampler, TopPDrawsFromTheFullSortsNucleus) {
  const int64_t vocab = 20000;
  std::vector<float> logits(vocab);
  for (int64_t i = 0; i < vocab; ++i) logits[(i * 7919) % vocab] = -0.005f * static_cast<float>(i);
  std::vector<int64_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  double total = 0;
  for (float l : logits) total += std::exp(static_cast<double>(l));
  double cumulative = 0;
  size_t n = 0;
  while (cumulative < 0.9 * total) cumulative += std::exp(static_cast<double>(logits[order[n++]]));
  ASSERT_GT(n, 256u);  // the selection must widen once
  const std::set<int64_t> nucleus(order.begin(), order.begin() + n);
  SamplingOptions options;
  options.seed = 5;
  options.top_p = 0.9;
  Sampler sampler(options);
  const int draws = 5000;
  int top = 0;
  for (int i = 0; i < draws; ++i) {
    const int64_t id = sampler.Next(logits.data(), vocab).id;
    ASSERT_TRUE(nucleus.count(id)) << id << " is outside the " << n << "-id nucleus";
    top += id == order[0];
  }
  const double p = std::exp(static_cast<double>(logits[order[0]])) / cumulative;
  EXPECT_NEAR(top / double(draws), p, 4 * std::sqrt(p * (1 - p) / draws));
}

TEST(Sampler, RepetitionPenaltyMovesAwayFromSeenTokens) {
  SamplingOptions options;
  options.temperature = 0.0;
  options.repetition_penalty = 2.0;  // 3.0 -> 1.5, below 2.5
  EXPECT_EQ(Sampler(options, /*prompt=*/{1}).Next(kLogits.data(), 5).id, 4);
}

TEST(Sampler, ChosenTokensJoinThePenalisedHistory) {
  SamplingOptions options;
  options.temperature = 0.0;
  options.repetition_penalty = 2.0;
  Sampler sampler(options);
  EXPECT_EQ(sampler.Next(kLogits.data(), 5).id, 1);  // nothing seen yet
  EXPECT_EQ(sampler.Next(kLogits.data(), 5).id, 4);  // 1 is penalised now
}

TEST(Sampler, AMaskLeavesOnlyItsTokensAndRenormalises) {
  const std::vector<float> logits = {4.0f, 1.0f, 0.0f, 2.0f, -1.0f, 3.0f};
  const std::vector<uint64_t> allowed = {(1u << 1) | (1u << 3)};  // ids 1 and 3
  SamplingOptions greedy;
  greedy.temperature = 0.0;
  greedy.top_logprobs = 3;
  Sampler g(greedy);
  const SampledToken best = g.Next(logits.data(), 6, -1, &allowed);
  EXPECT_EQ(best.id, 3);
  // log p over the allowed pair alone: 2 - log(e^1 + e^2).
  EXPECT_NEAR(best.logprob, 2.0 - std::log(std::exp(1.0) + std::exp(2.0)), 1e-6);
  ASSERT_EQ(best.top.size(), 3u);
  EXPECT_EQ(best.top[0].first, 3);
  EXPECT_EQ(best.top[1].first, 1);
  EXPECT_TRUE(std::isinf(best.top[2].second));  // nothing else has any probability
  SamplingOptions hot;
  hot.temperature = 1.0;
  hot.logit_bias = {{0, 100.0f}, {5, 100.0f}};  // bias cannot bring back a masked token
  for (uint64_t seed = 0; seed < 50; ++seed) {
    hot.seed = seed;
    Sampler s(hot);
    const int64_t id = s.Next(logits.data(), 6, -1, &allowed).id;
    EXPECT_TRUE(id == 1 || id == 3) << id;
  }
}

TEST(SamplingOptions, InvalidValuesNameTheField) {
  SamplingOptions o;
  o.temperature = -1;
  EXPECT_NE(std::string(o.Validate().message()).find("temperature"), std::string::npos);
  o = {};
  o.top_p = 0;
  EXPECT_NE(std::string(o.Validate().message()).find("top_p"), std::string::npos);
  o.top_p = 1.5;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  o = {};
  o.top_k = -2;
  EXPECT_NE(std::string(o.Validate().message()).find("top_k"), std::string::npos);
  o = {};
  EXPECT_TRUE(o.Validate().ok());
}

}  // namespace
}  // namespace attn
