// Hands out a backend's state rows one sequence at a time: a row is reset
// when taken and released (its memory given back) when returned.
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
};

}  // namespace attn
