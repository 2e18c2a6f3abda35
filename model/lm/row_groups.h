// Row groups: work that is independent row by row (a decode step's
// sequences, a feed-forward's positions) split into one group per intra-op
// thread. CausalLm::step and the TorchScript backend's step use it.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <torch/types.h>

#include <algorithm>
#include <cstdint>

namespace attn {

// A decode step's rows are independent sequences on their own state rows. With
// several intra-op threads each thread steps one group of rows through all
// layers: one fork per step instead of one per operation, and the small
// operations between the products (norms, residual adds, the mixers' state
// updates), each too small to fork for, run on every thread instead of one.
// Below 2 groups of 16 rows one group is as fast or faster, since each group
// reads every weight (docs/benchmarks-log.md).
constexpr int64_t kMinRowsPerGroup = 16;

// A model with float32 weights splits rows into groups only while its
// layers' weights hold at most this many bytes. Each group reads every
// weight: cheap while they stay in the caches (the bundled models, 8 MB,
// step 1.07-1.47x faster grouped at 32 to 256 rows), but weights that come
// from memory are then read once per group, and each group's products get
// half the rows to share them. One batch with each product split across
// the threads stepped 1.03-1.25x faster at 32 and 64 rows for every
// imported model (360 MB to 1.15 GB of layer weights). Int8 and bf16
// copies keep the groups: their weights are a half or a quarter of the
// bytes, and one batch was no faster in int8 (RWKV-7 0.1B and Mamba-2 130M
// 4-10% slower, granite-4.0-h-350m and LFM2-350M -1% to +6%).
// docs/benchmarks-log.md, "A decode step's rows as one batch".
constexpr int64_t kMaxGroupedWeightBytes = int64_t{128} << 20;

// Groups of rows that work independent row by row splits into, one per
// intra-op thread: 1 when there are too few rows, no threads to spare (inside
// a parallel region already), or the work is not plain CPU inference.
inline int64_t RowGroups(int64_t rows, const torch::Tensor& like) {
  const int64_t threads = at::get_num_threads();
  if (threads < 2 || rows < 2 * kMinRowsPerGroup || at::in_parallel_region() ||
      !like.device().is_cpu() || torch::GradMode::is_enabled()) {
    return 1;
  }
  return std::min(threads, rows / kMinRowsPerGroup);
}

// Calls fn(group, first_row, row_count) for each of `groups` near-equal
// groups of `rows`, in parallel, with the caller's grad and inference modes.
template <typename Fn>
void ForEachRowGroup(int64_t rows, int64_t groups, Fn&& fn) {
  const at::ThreadLocalState caller;
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    at::ThreadLocalStateGuard guard(caller);
    for (int64_t g = begin; g < end; ++g) {
      const int64_t first = rows * g / groups;
      fn(g, first, rows * (g + 1) / groups - first);
    }
  });
}

}  // namespace attn
