#include "client/segments.h"

#include <algorithm>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace attn::client {

absl::StatusOr<std::vector<int64_t>> ParseSegmentBounds(const std::string& text) {
  std::vector<int64_t> bounds;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t bound = 0;
    if (!absl::SimpleAtoi(item, &bound) || bound <= 0 ||
        (!bounds.empty() && bound <= bounds.back())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--segments: expected rising positive token positions such as 128,256,512; got \"", item,
          "\""));
    }
    bounds.push_back(bound);
  }
  return bounds;
}

std::vector<SegmentScore> ScoreBySegment(const std::vector<float>& logprobs,
                                         const std::vector<int64_t>& bounds) {
  const auto count = static_cast<int64_t>(logprobs.size());
  std::vector<int64_t> edges = {0};
  for (int64_t bound : bounds) edges.push_back(std::min(bound, count));
  edges.push_back(count);
  std::vector<SegmentScore> segments;
  for (size_t i = 0; i + 1 < edges.size(); ++i) {
    SegmentScore s;
    s.begin = edges[i];
    s.end = edges[i + 1];
    if (s.end <= s.begin) continue;
    double total = 0.0;
    for (int64_t t = std::max<int64_t>(s.begin, 1); t < s.end; ++t, ++s.tokens)
      total -= logprobs[t];
    if (s.tokens == 0) continue;
    s.mean_nll = total / static_cast<double>(s.tokens);
    segments.push_back(s);
  }
  return segments;
}

}  // namespace attn::client
