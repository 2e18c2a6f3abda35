#include "model/lm/state_pool.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"

namespace attn {

StatePool::StatePool(const CausalLm& model, int64_t capacity, torch::Device device)
    : model_(model), state_(model->initial_state(capacity, device)), in_use_(capacity, false) {
  for (int64_t slot = capacity - 1; slot >= 0; --slot) free_.push_back(slot);
}

absl::StatusOr<int64_t> StatePool::Acquire() {
  if (free_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", capacity(), " sequence slots are in use"));
  }
  const int64_t slot = free_.back();
  free_.pop_back();
  model_->ResetSlots(state_, torch::tensor({slot}, torch::kLong));
  in_use_[slot] = true;
  ++in_use_count_;
  return slot;
}

absl::Status StatePool::Release(int64_t slot) {
  if (slot < 0 || slot >= capacity() || !in_use_[slot]) {
    return absl::InvalidArgumentError(absl::StrCat("slot ", slot, " is not in use"));
  }
  model_->ReleaseSlots(state_, torch::tensor({slot}, torch::kLong));
  in_use_[slot] = false;
  --in_use_count_;
  free_.push_back(slot);
  return absl::OkStatus();
}

}  // namespace attn
