// Hands out a backend's state rows one sequence at a time: a row is reset
// when taken and released (its memory given back) when returned, except the
// most recently returned row, whose release waits until another row is
// returned.
//
// Why: rows are reused as a stack, so a conversation's next turn usually
// takes the row its last turn returned, and loads the cached state of that
// turn into it. A key/value cache row whose pages went back must fault in a
// fresh page per 4 KB again first (about 19,000 at 3,000 tokens of
// LFM2-350M: some 60 ms of a turn's time to first token). Keeping one row
// mapped costs at most one sequence's memory.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace attn {

class LmBackend;

class RowPool {
 public:
  // Hands out the rows `backend` holds (LmBackend::rows()); the backend must
  // outlive the pool.
  explicit RowPool(LmBackend& backend);

  // A free row, reset to the empty sequence; kResourceExhausted when every
  // row is taken.
  absl::StatusOr<int64_t> Acquire();
  // Returns a row (LmBackend::ReleaseRow); a free or unknown row is an error.
  absl::Status Release(int64_t row);

  int64_t capacity() const { return static_cast<int64_t>(in_use_.size()); }
  int64_t in_use() const { return in_use_count_; }

 private:
  LmBackend& backend_;
  std::vector<bool> in_use_;
  std::vector<int64_t> free_;  // a stack: the most recently freed row is reused first
  int64_t in_use_count_ = 0;
  int64_t unreleased_ = -1;  // the free row whose LmBackend::ReleaseRow waits, if any
};

}  // namespace attn
