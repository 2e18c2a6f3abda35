// The rows of the decode step or prefill in flight, checked once for the
// whole model.
//
// A step names the pool rows it continues (`slots`). Each layer used to
// check them on the host and copy them to the state's device: on a GPU each
// copy between host and device waits for the device, a few times a layer and
// token, and a step that waits can neither run ahead of the GPU nor be
// captured in a CUDA graph. CausalLm::step checks the rows once on the host
// (CheckSlots), copies them to the model's device once, and holds a
// StepRows while its layers run: a mixer's ResolveSlots then returns the
// host ids without checking them again, and RowsOn(ids, device) the device
// copy without copying.
//
// Thread-local, like LibTorch's grad mode: a call on another thread (the
// CPU's row groups, which step slices of the rows) checks its rows itself.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace attn {

class StepRows {
 public:
  // Who keeps the rows within a bounded layer's max_context: the layers,
  // which read the rows' lengths (on a GPU, a wait), or the caller, which
  // checked them before the step (a CUDA graph's capture: its replays run
  // no host code, so a check inside the step would guard nothing).
  enum class Capacity { kLayersCheck, kCallerChecked };

  // `host`: checked int64 ids on the CPU; `device`: the same ids on the
  // model's device (the same tensor where that is the CPU).
  StepRows(torch::Tensor host, torch::Tensor device, Capacity capacity = Capacity::kLayersCheck);
  ~StepRows();
  StepRows(const StepRows&) = delete;
  StepRows& operator=(const StepRows&) = delete;

  // The rows of the step running on this thread, or null.
  static const StepRows* Current();
  // Whether `slots` is this step's rows, either copy.
  bool Names(const torch::Tensor& slots) const;
  const torch::Tensor& host() const { return host_; }
  const torch::Tensor& device() const { return device_; }
  Capacity capacity() const { return capacity_; }
  // Whether `slots` are the rows of the step running on this thread and its
  // caller checked their room (Capacity::kCallerChecked): a bounded layer
  // or lookup then neither checks nor reads the rows' lengths.
  static bool RoomCheckedByCaller(const torch::Tensor& slots);
  // The pool's lengths on the host (int64, every row), as `length` (a
  // layer's) held them when a layer first asked during this call: read
  // once, one wait for a GPU instead of one a layer (a prefill's room and
  // common start). Every layer's lengths are the same until it advances its
  // own, which it does after reading them.
  const torch::Tensor& HostLengths(const torch::Tensor& length) const;

 private:
  torch::Tensor host_, device_;
  Capacity capacity_;
  mutable torch::Tensor host_lengths_;
  const StepRows* previous_;
};

// Checks `slots` for a call on `batch` rows of a pool of `pool_rows`
// (int64 [batch], each in [0, pool_rows), none twice; undefined: rows
// 0..batch-1) and returns them as a CPU int64 tensor. Throws c10::Error
// naming the offending slot.
torch::Tensor CheckSlots(int64_t pool_rows, const torch::Tensor& slots, int64_t batch);

// `rows` (int64) on `device`: the running step's device copy where `rows`
// is its host ids (no copy, no wait), else rows.to(device).
torch::Tensor RowsOn(const torch::Tensor& rows, torch::Device device);

// `t` on `device`. A CPU tensor bound for a GPU goes through pinned memory
// without waiting for the GPU: the copy is queued behind the work before it.
torch::Tensor HostToDevice(const torch::Tensor& t, torch::Device device);
// dst.copy_(src) for a CPU `src`, the same way when `dst` is on a GPU: one
// copy straight into `dst`, queued without waiting.
void CopyFromHost(torch::Tensor dst, const torch::Tensor& src);

}  // namespace attn
