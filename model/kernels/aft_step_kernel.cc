// AFT, one token per sequence: the running-maximum recurrence over the
// window ring and the carried sums (kernels.h). The parallel form is in
// aft_prefill_kernel.cc.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "model/kernels/kernel_common.h"
#include "model/kernels/kernels.h"

namespace attn::kernels {
namespace {

// Raises the running max c to include k and rescales the sums kept relative
// to it; scale[d] is exp(c_old - c_new), exactly 1 where c did not move.
// Returns true if any channel's max grew.
ATTN_INLINE bool RaiseRunningMax(const float* k, int64_t d_model, float* c, float* num, float* den,
                                 float* scale) {
  int grew = 0;
#pragma omp simd reduction(| : grew)
  for (int64_t d = 0; d < d_model; ++d) {
    const float raised = std::max(c[d], k[d]);
    grew |= raised > c[d];
    scale[d] = FastExp(c[d] - raised);  // exp(-inf) = 0 before the first key
    c[d] = raised;
    num[d] *= scale[d];
    den[d] *= scale[d];
  }
  return grew != 0;
}

// Per-step scratch of the AFT kernel, one row per batch element.
struct AftScratch {
  std::vector<float> scale;     // [B, D] exp(c_old - c_new)
  std::vector<float> exp_bias;  // [B, bias_heads, window] exp(w(t, delta))
  std::vector<char> grew;       // [B] whether any channel's max rose
};

// Phase 1 for one sequence, O(D + window * bias_heads): the key leaving the
// window joins the carried sums, the running max takes the new key (carried
// sums rescaled; the ring is rescaled in phase 2), the new key enters the
// ring, and exp(w) of every visible offset is computed.
ATTN_HOT void AftAdvance(const AftStepArgs& a, int64_t b, AftScratch& scratch) {
  const int64_t dm = a.channels, w = a.window;
  const int64_t slot = SlotOf(a.slots, b);
  const int64_t t = a.lengths[slot];
  const float* k = a.k + b * a.stride;
  const float* v = a.v + b * a.stride;
  float* c = a.c + slot * dm;
  float* num = a.num + slot * dm;
  float* den = a.den + slot * dm;
  if (w > 0 && t >= w) {  // the key at t - w sits in the slot the new key takes
    const float* ek = a.ring_ek + (slot * w + t % w) * dm;
    const float* ekv = a.ring_ekv + (slot * w + t % w) * dm;
    for (int64_t d = 0; d < dm; ++d) {
      num[d] += ekv[d];
      den[d] += ek[d];
    }
  }
  scratch.grew[b] = RaiseRunningMax(k, dm, c, num, den, scratch.scale.data() + b * dm);
  if (w == 0) {  // aft-simple: the new key goes straight into the sums
    for (int64_t d = 0; d < dm; ++d) {
      const float e = FastExp(k[d] - c[d]);
      num[d] += e * v[d];
      den[d] += e;
    }
    return;
  }
  float* ek_new = a.ring_ek + (slot * w + t % w) * dm;
  float* ekv_new = a.ring_ekv + (slot * w + t % w) * dm;
  for (int64_t d = 0; d < dm; ++d) {
    ek_new[d] = FastExp(k[d] - c[d]);
    ekv_new[d] = ek_new[d] * v[d];
  }
  const int64_t visible = std::min(t + 1, w);
  const int64_t bias_row = a.bias_rows > 1 ? t : 0;
  for (int64_t h = 0; h < a.bias_heads; ++h) {
    const float* bias = a.bias + (h * a.bias_rows + bias_row) * w;
    float* out = scratch.exp_bias.data() + (b * a.bias_heads + h) * w;
    for (int64_t delta = 0; delta < visible; ++delta) out[delta] = FastExp(bias[delta]);
  }
}

// Phase 2 for channels [begin, end) of one sequence, O(window * width): the
// ring entries older than the new key are rescaled if the max rose, in the
// same pass that sums them with their bias factors; then the output.
ATTN_HOT void AftWindowSums(const AftStepArgs& a, int64_t b, int64_t begin, int64_t end,
                            const AftScratch& scratch) {
  const int64_t dm = a.channels, w = a.window;
  const int64_t slot = SlotOf(a.slots, b);
  const int64_t t = a.lengths[slot];
  const float* q = a.q + b * a.stride;
  const float* num = a.num + slot * dm;
  const float* den = a.den + slot * dm;
  float* out = a.out + b * dm;
  if (w == 0) {
    for (int64_t d = begin; d < end; ++d) out[d] = Sigmoid(q[d]) * num[d] / den[d];
    return;
  }
  const float* scale = scratch.scale.data() + b * dm;
  const bool rescale = scratch.grew[b] != 0;
  const int64_t visible = std::min(t + 1, w);
  const int64_t group = dm / a.bias_heads;
  float acc_num[kChannelBlock];
  float acc_den[kChannelBlock];
  for (int64_t d = begin; d < end; ++d) {
    acc_num[d - begin] = num[d];
    acc_den[d - begin] = den[d];
  }
  for (int64_t delta = 0; delta < visible; ++delta) {
    const int64_t r = (t - delta) % w;
    float* ek = a.ring_ek + (slot * w + r) * dm;
    float* ekv = a.ring_ekv + (slot * w + r) * dm;
    if (rescale && delta > 0) {  // delta 0 is the new key, already at the new max
      for (int64_t d = begin; d < end; ++d) {
        ek[d] *= scale[d];
        ekv[d] *= scale[d];
      }
    }
    for (int64_t d = begin; d < end;) {  // one run per bias head inside the block
      const int64_t h = d / group;
      const int64_t run_end = std::min(end, (h + 1) * group);
      const float e = scratch.exp_bias[(b * a.bias_heads + h) * w + delta];
      for (int64_t i = d; i < run_end; ++i) {
        acc_num[i - begin] += e * ekv[i];
        acc_den[i - begin] += e * ek[i];
      }
      d = run_end;
    }
  }
  for (int64_t d = begin; d < end; ++d) {
    out[d] = Sigmoid(q[d]) * acc_num[d - begin] / acc_den[d - begin];
  }
}

}  // namespace

void AftStep(const AftStepArgs& a) {
  AftScratch scratch;
  scratch.scale.resize(a.batch * a.channels);
  scratch.exp_bias.resize(a.batch * a.bias_heads * std::max<int64_t>(a.window, 1));
  scratch.grew.resize(a.batch);
  const int64_t advance_work = 4 * a.channels + a.bias_heads * a.window;
  at::parallel_for(0, a.batch, GrainFor(advance_work), [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) AftAdvance(a, b, scratch);
  });
  // Phase 2 splits each sequence's channels into blocks, so that one long
  // sequence (aft-full) still uses every thread.
  int64_t longest = 1;
  for (int64_t b = 0; b < a.batch; ++b) {
    longest = std::max(longest, std::min(a.lengths[SlotOf(a.slots, b)] + 1, a.window));
  }
  const int64_t blocks = (a.channels + kChannelBlock - 1) / kChannelBlock;
  const int64_t block_work = 2 * longest * std::min(a.channels, kChannelBlock);
  at::parallel_for(0, a.batch * blocks, GrainFor(block_work), [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / blocks, first = (task % blocks) * kChannelBlock;
      AftWindowSums(a, b, first, std::min(a.channels, first + kChannelBlock), scratch);
    }
  });
}

}  // namespace attn::kernels
