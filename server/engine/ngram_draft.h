// Drafts for speculative decoding from a sequence's own tokens (prompt
// lookup): text that quotes its context (code edits, extraction, answers
// citing a document) continues the way an earlier occurrence of its last
// few tokens did. Free to compute, and wrong drafts cost only their check.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace attn::serving {

// Longest and shortest suffix NgramDraft matches.
inline constexpr int64_t kDraftNgramMax = 4;
inline constexpr int64_t kDraftNgramMin = 2;

// The history is `prompt` followed by `output`. For n from kDraftNgramMax
// down to kDraftNgramMin: the most recent earlier occurrence of the
// history's last n tokens, and the `max_tokens` tokens that followed it in
// the history extended by the draft itself (so the last occurrence of a
// loop drafts the loop). Empty when no such suffix occurs earlier (or
// max_tokens < 1).
std::vector<int64_t> NgramDraft(absl::Span<const int64_t> prompt, absl::Span<const int64_t> output,
                                int64_t max_tokens);

}  // namespace attn::serving
