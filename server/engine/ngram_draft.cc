#include "server/engine/ngram_draft.h"

#include <algorithm>

namespace attn::serving {
namespace {

// The history as one sequence without copying it.
class History {
 public:
  History(absl::Span<const int64_t> prompt, absl::Span<const int64_t> output)
      : prompt_(prompt), output_(output) {}
  int64_t size() const { return static_cast<int64_t>(prompt_.size() + output_.size()); }
  int64_t operator[](int64_t i) const {
    const auto p = static_cast<int64_t>(prompt_.size());
    return i < p ? prompt_[i] : output_[i - p];
  }

 private:
  absl::Span<const int64_t> prompt_, output_;
};

// Whether history[at, at + n) equals the history's last n tokens.
bool MatchesSuffix(const History& history, int64_t at, int64_t n) {
  const int64_t tail = history.size() - n;
  for (int64_t j = n - 1; j >= 0; --j) {  // the last token differs most often
    if (history[at + j] != history[tail + j]) return false;
  }
  return true;
}

}  // namespace

std::vector<int64_t> NgramDraft(absl::Span<const int64_t> prompt, absl::Span<const int64_t> output,
                                int64_t max_tokens) {
  const History history(prompt, output);
  const int64_t size = history.size();
  if (max_tokens < 1) return {};
  for (int64_t n = std::min(kDraftNgramMax, size - 1); n >= kDraftNgramMin; --n) {
    // Latest first: an occurrence that ends before the last token, so that
    // at least one token follows it.
    for (int64_t at = size - n - 1; at >= 0; --at) {
      if (!MatchesSuffix(history, at, n)) continue;
      // Past the history's end the copy continues from its own start, as
      // an overlapping copy does (history + draft repeats what followed
      // `at`): a loop drafts whole periods.
      const int64_t from = at + n;
      std::vector<int64_t> draft(max_tokens);
      for (int64_t j = 0; j < max_tokens; ++j) {
        draft[j] = from + j < size ? history[from + j] : draft[from + j - size];
      }
      return draft;
    }
  }
  return {};
}

}  // namespace attn::serving
