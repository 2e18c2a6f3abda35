// The state rows of the sequences one engine runs: one LmState with
// `capacity` rows, handed out and taken back one row at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/lm/language_model.h"

namespace attn {

// The states of `capacity` sequences of one model. Fixed-size states
// (recurrent mixers) are allocated up front; a key/value cache is reserved
// at max_context per row but backed by memory only as its rows are written,
// and a released row gives its memory back (model/mixers/kv_cache.h).
class StatePool {
 public:
  StatePool(const CausalLm& model, int64_t capacity, torch::Device device);

  // A free row, reset to the empty sequence; kResourceExhausted when every
  // row is taken.
  absl::StatusOr<int64_t> Acquire();
  // Returns a row and the memory it holds (CausalLm::ReleaseSlots);
  // releasing a free or unknown row is an error.
  absl::Status Release(int64_t slot);

  int64_t capacity() const { return static_cast<int64_t>(in_use_.size()); }
  int64_t in_use() const { return in_use_count_; }
  // Bytes a row may hold at the most (a cache at max_context).
  int64_t bytes_per_slot() const { return state_.bytes_per_row(); }
  LmState& state() { return state_; }

 private:
  CausalLm model_;
  LmState state_;
  std::vector<bool> in_use_;
  std::vector<int64_t> free_;  // a stack: the most recently freed row is reused first
  int64_t in_use_count_ = 0;
};

}  // namespace attn
