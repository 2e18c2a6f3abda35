#include "model/mixers/step_rows.h"

#include <torch/torch.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace attn {
namespace {

thread_local const StepRows* current_step = nullptr;

}  // namespace

StepRows::StepRows(torch::Tensor host, torch::Tensor device, Capacity capacity)
    : host_(std::move(host)),
      device_(std::move(device)),
      capacity_(capacity),
      previous_(current_step) {
  current_step = this;
}

StepRows::~StepRows() { current_step = previous_; }

const StepRows* StepRows::Current() { return current_step; }

const torch::Tensor& StepRows::HostLengths(const torch::Tensor& length) const {
  // A copy even on the CPU: the layers advance their lengths in place.
  if (!host_lengths_.defined()) {
    host_lengths_ =
        length.to(torch::kCPU, torch::kLong, /*non_blocking=*/false, /*copy=*/true).contiguous();
  }
  return host_lengths_;
}

bool StepRows::RoomCheckedByCaller(const torch::Tensor& slots) {
  const StepRows* step = Current();
  return step != nullptr && step->capacity_ == Capacity::kCallerChecked && step->Names(slots);
}

bool StepRows::Names(const torch::Tensor& slots) const {
  return slots.defined() && (slots.is_same(host_) || slots.is_same(device_));
}

// The checks below run on every decode step, so they loop over raw CPU
// memory instead of issuing tensor ops (~1.3 us each here).
torch::Tensor CheckSlots(int64_t pool_rows, const torch::Tensor& slots, int64_t batch) {
  if (!slots.defined()) {
    TORCH_CHECK(batch <= pool_rows, "batch of ", batch, " sequences but the state has ", pool_rows,
                " rows");
    return torch::arange(batch, torch::kLong);
  }
  auto resolved = slots.to(torch::kCPU, torch::kLong).contiguous();
  TORCH_CHECK(resolved.dim() == 1 && resolved.size(0) == batch, "slots must be int64 [", batch,
              "], got ", slots.sizes());
  const int64_t* ids = resolved.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(ids[b] >= 0 && ids[b] < pool_rows, "slot ", ids[b], " out of range [0, ", pool_rows,
                ")");
  }
  // Two rows of one call must not share a state row: the fused kernels would
  // update it from two threads. (One row cannot repeat: no work at batch 1.)
  if (batch > 1) {
    std::vector<int64_t> sorted(ids, ids + batch);
    std::sort(sorted.begin(), sorted.end());
    const auto repeated = std::adjacent_find(sorted.begin(), sorted.end());
    TORCH_CHECK(repeated == sorted.end(), "slot ", repeated == sorted.end() ? 0 : *repeated,
                " appears twice in one call");
  }
  return resolved;
}

torch::Tensor RowsOn(const torch::Tensor& rows, torch::Device device) {
  const StepRows* step = StepRows::Current();
  if (step != nullptr && rows.is_same(step->host()) && step->device().device() == device) {
    return step->device();
  }
  return rows.to(device);
}

torch::Tensor HostToDevice(const torch::Tensor& t, torch::Device device) {
  if (t.device() == device) return t;
  if (t.is_cpu() && device.is_cuda()) return t.pin_memory().to(device, /*non_blocking=*/true);
  return t.to(device);
}

void CopyFromHost(torch::Tensor dst, const torch::Tensor& src) {
  // Pinned memory from LibTorch's caching host allocator stays reserved
  // until the queued copy has read it.
  if (src.is_cpu() && dst.is_cuda()) {
    dst.copy_(src.pin_memory(), /*non_blocking=*/true);
  } else {
    dst.copy_(src);
  }
}

}  // namespace attn
