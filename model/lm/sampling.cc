#include "model/lm/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "model/kernels/kernels.h"

namespace attn {

absl::Status SamplingOptions::Validate() const {
  if (!(temperature >= 0.0) || !std::isfinite(temperature)) {
    return absl::InvalidArgumentError(absl::StrCat("temperature must be >= 0, got ", temperature));
  }
  if (!(top_p > 0.0 && top_p <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", top_p));
  }
  if (top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", top_k));
  if (!(repetition_penalty > 0.0) || !std::isfinite(repetition_penalty)) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty must be > 0, got ", repetition_penalty));
  }
  for (auto [name, value] : {std::pair<const char*, double>{"presence_penalty", presence_penalty},
                             {"frequency_penalty", frequency_penalty}}) {
    if (!(value >= -2.0 && value <= 2.0)) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be in [-2, 2], got ", value));
    }
  }
  for (const auto& [token, bias] : logit_bias) {
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias[", token, "] must be in [-100, 100], got ", bias));
    }
  }
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_logprobs must be in [0, ", kMaxTopLogprobs, "], got ", top_logprobs));
  }
  return absl::OkStatus();
}

double LogSoftmaxAt(const float* logits, int64_t vocab, int64_t id) {
  return static_cast<double>(logits[id]) - kernels::LogSumExp(logits, vocab);
}

Sampler::Sampler(const SamplingOptions& options, const std::vector<int64_t>& prompt)
    : options_(options), rng_(options.seed), seen_(prompt.begin(), prompt.end()) {}

SampledToken Sampler::Next(const float* logits, int64_t full_vocab, int64_t choosable,
                           const std::vector<uint64_t>* allowed) {
  // Choosing looks at the choosable ids alone; the log-probabilities below
  // are the model's, over its whole vocabulary.
  const int64_t vocab = choosable < 0 ? full_vocab : std::min(choosable, full_vocab);
  if (allowed != nullptr) {
    masked_.assign(full_vocab, -std::numeric_limits<float>::infinity());
    const int64_t words =
        std::min<int64_t>(static_cast<int64_t>(allowed->size()), (vocab + 63) / 64);
    for (int64_t w = 0; w < words; ++w) {
      for (uint64_t bits = (*allowed)[w]; bits != 0; bits &= bits - 1) {
        const int64_t id = w * 64 + __builtin_ctzll(bits);
        if (id < vocab) masked_[id] = logits[id];
      }
    }
    logits = masked_.data();
  }
  work_.assign(logits, logits + vocab);
  for (const auto& [token, bias] : options_.logit_bias) {
    if (token >= 0 && token < vocab) work_[token] += bias;
  }
  if (options_.presence_penalty != 0.0 || options_.frequency_penalty != 0.0) {
    for (const auto& [token, count] : generated_) {
      if (token < 0 || token >= vocab) continue;
      work_[token] -= static_cast<float>(options_.presence_penalty +
                                         static_cast<double>(count) * options_.frequency_penalty);
    }
  }
  if (options_.repetition_penalty != 1.0) {
    const auto penalty = static_cast<float>(options_.repetition_penalty);
    for (int64_t id : seen_) {
      if (id < 0 || id >= vocab) continue;
      work_[id] = work_[id] > 0 ? work_[id] / penalty : work_[id] * penalty;
    }
  }
  int64_t chosen = 0;
  if (options_.temperature == 0.0) {
    chosen = kernels::ArgMax(work_.data(), vocab);
  } else {
    const auto inv_t = static_cast<float>(1.0 / options_.temperature);
    for (auto& w : work_) w *= inv_t;
    const bool all = (options_.top_k == 0 || options_.top_k >= vocab) && options_.top_p >= 1.0;
    chosen = all ? DrawFromAll(vocab) : -1;
    if (chosen < 0) chosen = DrawFromCandidates(vocab);
  }
  seen_.insert(chosen);
  ++generated_[chosen];
  SampledToken token{chosen, LogSoftmaxAt(logits, full_vocab, chosen), {}};
  if (options_.top_logprobs > 0) {
    token.top = TopLogprobs(logits, full_vocab, options_.top_logprobs, vocab);
  }
  return token;
}

int64_t Sampler::DrawFromAll(int64_t vocab) {
  // Each block's share of the probability (vectorised log-sum-exp), then the
  // ids of the block the draw falls in: two passes over the vocabulary and
  // exp of at most one block's ids, against an O(V log V) sort.
  constexpr int64_t kBlock = 256;
  const float* w = work_.data();
  const double log_total = kernels::LogSumExp(w, vocab);
  if (!std::isfinite(log_total)) return -1;
  const int64_t blocks = (vocab + kBlock - 1) / kBlock;
  probs_.resize(blocks);
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b) {
    const float block = kernels::LogSumExp(w + b * kBlock, std::min(kBlock, vocab - b * kBlock));
    total += probs_[b] = std::exp(static_cast<double>(block) - log_total);
  }
  std::uniform_real_distribution<double> uniform(0.0, total);
  double r = uniform(rng_);
  int64_t b = 0;
  while (b < blocks - 1 && (r >= probs_[b] || probs_[b] == 0.0)) r -= probs_[b++];
  while (probs_[b] == 0.0) --b;  // rounding ran past the last block with mass
  const int64_t first = b * kBlock, last = std::min(first + kBlock, vocab);
  int64_t chosen = -1;
  for (int64_t i = first; i < last; ++i) {
    const double p = std::exp(static_cast<double>(w[i]) - log_total);
    if (p == 0.0) continue;
    chosen = i;  // rounding may leave r >= 0 after the block: its last id with mass
    if ((r -= p) < 0) break;
  }
  return chosen;
}

int64_t Sampler::DrawFromCandidates(int64_t vocab) {
  candidates_.resize(vocab);
  std::iota(candidates_.begin(), candidates_.end(), 0);
  auto more_likely = [&](int64_t a, int64_t b) {
    return work_[a] > work_[b] || (work_[a] == work_[b] && a < b);
  };
  int64_t keep = vocab;
  if (options_.top_k > 0 && options_.top_k < vocab) {
    keep = options_.top_k;
    std::nth_element(candidates_.begin(), candidates_.begin() + keep, candidates_.end(),
                     more_likely);
  }
  const float max = *std::max_element(work_.begin(), work_.begin() + vocab);
  double total = 0.0;
  for (int64_t i = 0; i < keep; ++i) total += std::exp(work_[candidates_[i]] - max);
  // Only the candidates the top_p prefix can reach are sorted: the 256 or
  // the 4,096 most likely, once their mass reaches top_p of the total (a
  // flat distribution whose prefix needs more sorts them all). The same
  // comparator selects the set a full sort would lead with, so the draw is
  // the full sort's; sorting 65,536 ids took ~7 ms a token.
  int64_t sorted = keep;
  if (options_.top_p < 1.0) {
    for (const int64_t k : {int64_t{256}, int64_t{4096}}) {
      if (k >= keep / 4) break;
      std::nth_element(candidates_.begin(), candidates_.begin() + k, candidates_.begin() + keep,
                       more_likely);
      double mass = 0.0;
      for (int64_t i = 0; i < k; ++i) mass += std::exp(work_[candidates_[i]] - max);
      if (mass >= options_.top_p * total) {
        sorted = k;
        break;
      }
    }
  }
  std::sort(candidates_.begin(), candidates_.begin() + sorted, more_likely);
  probs_.resize(sorted);
  for (int64_t i = 0; i < sorted; ++i) probs_[i] = std::exp(work_[candidates_[i]] - max);
  if (options_.top_p < 1.0) {  // the smallest prefix reaching top_p
    double cumulative = 0.0;
    int64_t n = 0;
    while (n < sorted && cumulative < options_.top_p * total) cumulative += probs_[n++];
    keep = std::max<int64_t>(n, 1);
    total = cumulative;
  }
  std::uniform_real_distribution<double> uniform(0.0, total);
  double r = uniform(rng_);
  int64_t chosen = candidates_[keep - 1];
  for (int64_t i = 0; i < keep; ++i) {
    r -= probs_[i];
    if (r < 0) {
      chosen = candidates_[i];
      break;
    }
  }
  return chosen;
}

std::vector<std::pair<int64_t, float>> TopLogprobs(const float* logits, int64_t vocab,
                                                   int64_t count, int64_t choosable) {
  const int64_t listed = choosable < 0 ? vocab : std::min(choosable, vocab);
  count = std::min(count, listed);
  std::vector<int64_t> ids(listed);
  std::iota(ids.begin(), ids.end(), 0);
  auto more_likely = [&](int64_t a, int64_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + count, ids.end(), more_likely);
  const double total = kernels::LogSumExp(logits, vocab);
  std::vector<std::pair<int64_t, float>> top;
  for (int64_t i = 0; i < count; ++i) {
    top.emplace_back(ids[i], static_cast<float>(static_cast<double>(logits[ids[i]]) - total));
  }
  return top;
}

}  // namespace attn
