#include "model/backend/row_pool.h"

#include "absl/strings/str_cat.h"
#include "model/backend/backend.h"

namespace attn {

RowPool::RowPool(LmBackend& backend) : backend_(backend), in_use_(backend.rows(), false) {
  for (int64_t row = capacity() - 1; row >= 0; --row) free_.push_back(row);
}

absl::StatusOr<int64_t> RowPool::Acquire() {
  if (free_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", capacity(), " sequence slots are in use"));
  }
  const int64_t row = free_.back();
  if (absl::Status reset = backend_.ResetRow(row); !reset.ok()) return reset;
  free_.pop_back();
  if (row == unreleased_) unreleased_ = -1;  // reset: nothing left to release
  in_use_[row] = true;
  ++in_use_count_;
  return row;
}

absl::Status RowPool::Release(int64_t row) {
  if (row < 0 || row >= capacity() || !in_use_[row]) {
    return absl::InvalidArgumentError(absl::StrCat("slot ", row, " is not in use"));
  }
  in_use_[row] = false;
  --in_use_count_;
  free_.push_back(row);
  const int64_t previous = unreleased_;
  unreleased_ = row;
  return previous >= 0 ? backend_.ReleaseRow(previous) : absl::OkStatus();
}

}  // namespace attn
