// Requests the server tests send.
#pragma once

#include <string>

#include "attn/v1/text_generation.pb.h"

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

}  // namespace attn::serving::testing
