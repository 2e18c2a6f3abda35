// Requests the server tests send.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attn/v1/text_generation.pb.h"
#include "server/engine/engine.h"

namespace attn::serving::testing {

// Greedy, past end-of-sequence, with each token's log-probability: the
// request whose result is a function of the model alone.
inline attn::v1::GenerateRequest GreedyRequest(const std::string& model, const std::string& prompt,
                                               int max_tokens) {
  attn::v1::GenerateRequest r;
  r.set_model(model);
  r.set_prompt(prompt);
  r.set_max_tokens(max_tokens);
  r.set_temperature(0);
  r.set_ignore_eos(true);
  r.set_logprobs(true);
  return r;
}

// GreedyRequest's engine request: what the engine tests submit.
inline EngineRequest GreedyEngineRequest(std::vector<int64_t> prompt, int64_t max_tokens) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0;
  r.ignore_eos = true;
  r.logprobs = true;
  return r;
}

// `length` ids of the tiny vocabulary (3 to 292) in a fixed scrambled
// order, starting at `offset`: a prefix of a longer run is the shorter run.
inline std::vector<int64_t> SyntheticIds(int64_t length, int64_t offset) {
  std::vector<int64_t> ids(length);
  for (int64_t i = 0; i < length; ++i) ids[i] = 3 + (offset + i * 37) % 290;
  return ids;
}

}  // namespace attn::serving::testing
