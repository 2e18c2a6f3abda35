#include "model/backend/native_backend.h"

#include <torch/torch.h>

#include "model/backend/guarded.h"

namespace attn {
using backend_internal::Guarded;
using backend_internal::GuardedCall;

NativeBackend::NativeBackend(CausalLm model)
    : model_(std::move(model)), device_(model_->parameters().front().device()) {}

absl::Status NativeBackend::AllocateRows(int64_t rows) {
  return GuardedCall("allocating state rows",
                     [&] { state_ = model_->initial_state(rows, device_); });
}

absl::Status NativeBackend::ResetRow(int64_t row) {
  return GuardedCall("resetting a state row",
                     [&] { model_->ResetSlots(state_, torch::tensor({row}, torch::kLong)); });
}

absl::Status NativeBackend::ReleaseRow(int64_t row) {
  return GuardedCall("releasing a state row",
                     [&] { model_->ReleaseSlots(state_, torch::tensor({row}, torch::kLong)); });
}

absl::StatusOr<torch::Tensor> NativeBackend::Prefill(const torch::Tensor& tokens,
                                                     const torch::Tensor& rows,
                                                     PrefillLogits logits) {
  return Guarded("prefill", [&] { return model_->prefill(tokens, state_, rows, logits); });
}

absl::StatusOr<torch::Tensor> NativeBackend::Step(const torch::Tensor& tokens,
                                                  const torch::Tensor& rows) {
  return Guarded("decode step", [&] { return model_->step(tokens, rows, state_); });
}

}  // namespace attn
