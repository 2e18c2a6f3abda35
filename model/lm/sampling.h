// Choosing the next token from a model's logits, per sequence.
//
// Order of operations, as vLLM and Hugging Face apply them:
//   1. logit bias: a fixed amount added to chosen tokens' logits (OpenAI's
//      logit_bias);
//   2. repetition penalty (Keskar et al. 2019): a logit of a token already in
//      the sequence is divided by the penalty if positive, multiplied if not;
//   3. presence and frequency penalties (OpenAI's): a token generated c > 0
//      times so far loses presence_penalty + c * frequency_penalty;
//   4. temperature 0: the arg max (greedy), ties to the lowest id;
//   5. otherwise logits / temperature, keep the top_k largest (0: all), keep
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
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace attn {

struct SamplingOptions {
  double temperature = 1.0;                           // 0: greedy
  int64_t top_k = 0;                                  // 0: no limit
  double top_p = 1.0;                                 // (0, 1]
  double repetition_penalty = 1.0;                    // >= 1 discourages repeats; 1: off
  double presence_penalty = 0.0;                      // [-2, 2]; 0: off
  double frequency_penalty = 0.0;                     // [-2, 2]; 0: off
  std::vector<std::pair<int64_t, float>> logit_bias;  // (token, [-100, 100])
  // How many of the most likely tokens to report with each choice
  // (SampledToken::top), 0 to kMaxTopLogprobs.
  int64_t top_logprobs = 0;
  uint64_t seed = 0;

  // kInvalidArgument naming the field: negative temperature, top_p outside
  // (0, 1], negative top_k, penalty not positive, presence or frequency
  // penalty outside [-2, 2], a bias outside [-100, 100], top_logprobs
  // outside [0, kMaxTopLogprobs]. (Token ids are the caller's to check.)
  absl::Status Validate() const;
};

// The most alternatives a choice may report (OpenAI's top_logprobs limit).
inline constexpr int64_t kMaxTopLogprobs = 20;

struct SampledToken {
  int64_t id = 0;
  double logprob = 0.0;  // log p_model(id | context)
  // The top_logprobs most likely tokens and their log p_model, most likely
  // first (ties: lower id first).
  std::vector<std::pair<int64_t, float>> top;
};

class Sampler {
 public:
  // `prompt`: the tokens the sequence starts with, for the repetition
  // penalty; every token Next() chooses joins them.
  explicit Sampler(const SamplingOptions& options, const std::vector<int64_t>& prompt = {});

  // logits: the model's [vocab] scores for the next token. Only ids below
  // `choosable` (at most vocab; -1: all) may be chosen or listed among the
  // alternatives; log-probabilities are over the whole vocab all the same.
  // With `allowed` (bit id % 64 of word id / 64; ids past it are not
  // allowed), every other id is masked out before anything else, and
  // log-probabilities are those of the masked distribution (structured
  // output: what the constrained model chose among).
  SampledToken Next(const float* logits, int64_t vocab, int64_t choosable = -1,
                    const std::vector<uint64_t>* allowed = nullptr);

 private:
  // Draws from softmax(work_[0, vocab)) in id order, without sorting: the
  // path with no top_k or top_p, where sorting a 65,536-token vocabulary
  // cost more than a small model's decode step. -1 when the logits have no
  // finite log-sum-exp (NaN, all -inf); the sorting path then decides.
  int64_t DrawFromAll(int64_t vocab);
  // Draws from the top_k / top_p candidates, most likely first.
  int64_t DrawFromCandidates(int64_t vocab);

  SamplingOptions options_;
  std::mt19937_64 rng_;
  std::unordered_set<int64_t> seen_;                // distinct tokens of the sequence so far
  std::unordered_map<int64_t, int64_t> generated_;  // tokens chosen so far, counted
  std::vector<float> work_;                         // processed logits
  std::vector<float> masked_;                       // logits with disallowed ids at -inf
  std::vector<int64_t> candidates_;                 // token ids, most likely first
  std::vector<double> probs_;                       // unnormalised probabilities of the candidates
                                                    // (DrawFromAll: of its blocks)
};

// log softmax(logits)[id], computed stably.
double LogSoftmaxAt(const float* logits, int64_t vocab, int64_t id);

// The `count` most likely tokens of `logits` among ids below `choosable`
// (-1: all) and their log softmax over all `vocab`, most likely first
// (ties: lower id first).
std::vector<std::pair<int64_t, float>> TopLogprobs(const float* logits, int64_t vocab,
                                                   int64_t count, int64_t choosable = -1);

}  // namespace attn
