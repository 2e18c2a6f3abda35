// Loss by position segment: what `attnctl score --segments` prints, so that
// a model's quality can be read as a function of how much context it has
// seen (a long-context model's loss falls with position; one that breaks
// past its training length rises).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace attn::client {

struct SegmentScore {
  int64_t begin = 0, end = 0;  // token positions [begin, end)
  int64_t tokens = 0;          // scored tokens in the segment
  double mean_nll = 0.0;       // mean -log p per scored token (nats)
};

// "128,256,512" -> the bounds 128, 256, 512: segments [0, 128), [128, 256),
// [256, 512) and [512, end of text). Bounds must be positive and rising.
absl::StatusOr<std::vector<int64_t>> ParseSegmentBounds(const std::string& text);

// The mean -logprob of the scored tokens in each segment. logprobs[i] is the
// log-probability of token i; token 0 has no context and is not scored.
// Segments past the text are left out.
std::vector<SegmentScore> ScoreBySegment(const std::vector<float>& logprobs,
                                         const std::vector<int64_t>& bounds);

}  // namespace attn::client
