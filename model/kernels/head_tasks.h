// ForEachRowAndHead: the task loop of the per-head kernels (attention and
// linear attention). Only the kernel files include this.
#pragma once

#include <ATen/Parallel.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "model/kernels/kernel_common.h"
#include "model/kernels/kernels.h"

namespace attn::kernels {

// Runs one_head(head_size, b, h, scratch) for every row b and head h, split
// over the intra-op threads by `work_per_head` multiply-adds, with one scratch
// vector per thread. head_size is std::integral_constant<int64_t, N>: N is
// a.head_dim when the kernels have a compiled-in version for it (32, 40, 64),
// else 0 (read it at run time).
template <typename Args, typename OneHead>
void ForEachRowAndHead(const Args& a, int64_t work_per_head, OneHead&& one_head) {
  auto run = [&](auto head_size) {
    at::parallel_for(0, a.batch * a.heads, GrainFor(work_per_head),
                     [&](int64_t begin, int64_t end) {
                       std::vector<float> scratch;
                       for (int64_t task = begin; task < end; ++task) {
                         one_head(head_size, task / a.heads, task % a.heads, scratch);
                       }
                     });
  };
  switch (a.head_dim) {
    case 32:
      return run(std::integral_constant<int64_t, 32>());
    case 40:
      return run(std::integral_constant<int64_t, 40>());
    case 64:
      return run(std::integral_constant<int64_t, 64>());
    default:
      return run(std::integral_constant<int64_t, 0>());
  }
}

// As above, with the register tiling (AttentionTiles) passed on as well:
// one_head(head_size, narrow, b, h, scratch), narrow a std::bool_constant
// that is true for AttentionTiles::kNarrow.
template <typename Args, typename OneHead>
void ForEachRowAndHead(const Args& a, int64_t work_per_head, AttentionTiles tiles,
                       OneHead&& one_head) {
  auto with = [&](auto narrow) {
    ForEachRowAndHead(a, work_per_head,
                      [&](auto head_size, int64_t b, int64_t h, std::vector<float>& scratch) {
                        one_head(head_size, narrow, b, h, scratch);
                      });
  };
  if (tiles == AttentionTiles::kNarrow) {
    with(std::true_type());
  } else {
    with(std::false_type());
  }
}

}  // namespace attn::kernels
