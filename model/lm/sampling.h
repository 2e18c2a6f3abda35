// Choosing the next token from a model's logits, per sequence.
//
// Order of operations, as vLLM and Hugging Face apply them:
//   1. repetition penalty (Keskar et al. 2019): a logit of a token already in
//      the sequence is divided by the penalty if positive, multiplied if not;
//   2. temperature 0: the arg max (greedy), ties to the lowest id;
//   3. otherwise logits / temperature, keep the top_k largest (0: all), keep
//      the smallest set of most likely tokens whose probability reaches
//      top_p (1: all), and draw from what is left.
//
// Each Sampler owns its random generator, seeded per request, so a request's
// output depends on its seed alone, whatever else shares its batch. The
// reported log-probability is the model's own log-softmax at the chosen
// token (before penalty and temperature), the quantity that scoring reports.
#pragma once

#include <cstdint>
#include <random>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"

namespace attn {

struct SamplingOptions {
  double temperature = 1.0;         // 0: greedy
  int64_t top_k = 0;                // 0: no limit
  double top_p = 1.0;               // (0, 1]
  double repetition_penalty = 1.0;  // >= 1 discourages repeats; 1: off
  uint64_t seed = 0;

  // kInvalidArgument naming the field: negative temperature, top_p outside
  // (0, 1], negative top_k, penalty not positive.
  absl::Status Validate() const;
};

struct SampledToken {
  int64_t id = 0;
  double logprob = 0.0;  // log p_model(id | context)
};

class Sampler {
 public:
  // `prompt`: the tokens the sequence starts with, for the repetition
  // penalty; every token Next() chooses joins them.
  explicit Sampler(const SamplingOptions& options, const std::vector<int64_t>& prompt = {});

  // logits: the model's [vocab] scores for the next token.
  SampledToken Next(const float* logits, int64_t vocab);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
  std::unordered_set<int64_t> seen_;  // distinct tokens of the sequence so far
  std::vector<float> work_;           // processed logits
  std::vector<int64_t> candidates_;   // token ids, most likely first
  std::vector<double> probs_;         // unnormalised probabilities of the candidates
};

// log softmax(logits)[id], computed stably.
double LogSoftmaxAt(const float* logits, int64_t vocab, int64_t id);

}  // namespace attn
