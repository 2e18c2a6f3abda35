// RWKV-4's per-channel recurrence (kernels.h: Rwkv4Wkv).
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "model/kernels/kernel_common.h"
#include "model/kernels/kernels.h"

namespace attn::kernels {
namespace {

// Channels [begin, end) of row `row` over every token.
ATTN_HOT void Rwkv4Channels(const Rwkv4WkvArgs& a, int64_t row, int64_t begin, int64_t end) {
  const int64_t c = a.channels, outputs = a.time - a.first_output;
  float* num = a.num + row * c;
  float* den = a.den + row * c;
  float* max = a.max + row * c;
  for (int64_t t = 0; t < a.time; ++t) {
    const float* k = a.k + (row * a.time + t) * c;
    const float* v = a.v + (row * a.time + t) * c;
    if (t >= a.first_output) {
      float* out = a.out + (row * outputs + t - a.first_output) * c;
      for (int64_t i = begin; i < end; ++i) {
        const float bonus = a.first[i] + k[i];
        const float q = std::max(max[i], bonus);
        const float past = std::exp(max[i] - q), now = std::exp(bonus - q);
        out[i] = (past * num[i] + now * v[i]) / (past * den[i] + now);
      }
    }
    for (int64_t i = begin; i < end; ++i) {
      const float decayed = max[i] + a.decay[i];
      const float q = std::max(decayed, k[i]);
      const float past = std::exp(decayed - q), now = std::exp(k[i] - q);
      num[i] = past * num[i] + now * v[i];
      den[i] = past * den[i] + now;
      max[i] = q;
    }
  }
}

}  // namespace

void Rwkv4Wkv(const Rwkv4WkvArgs& a) {
  const int64_t blocks = (a.channels + kChannelBlock - 1) / kChannelBlock;
  at::parallel_for(
      0, a.batch * blocks, GrainFor(a.time * kChannelBlock * 16), [&](int64_t begin, int64_t end) {
        for (int64_t task = begin; task < end; ++task) {
          const int64_t first = (task % blocks) * kChannelBlock;
          Rwkv4Channels(a, task / blocks, first, std::min(a.channels, first + kChannelBlock));
        }
      });
}

}  // namespace attn::kernels
