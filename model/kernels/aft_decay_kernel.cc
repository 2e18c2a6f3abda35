// AFT with a decayed past (kernels::AftDecay, model/kernels/kernels.h): per
// row and run of channels, token by token.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "model/kernels/kernel_common.h"
#include "model/kernels/kernels.h"

namespace attn::kernels {
namespace {

// Below this the carried den is renormalised (2^-30): far above float's
// smallest normal, so a key joining later at the sums' own level is kept
// whenever it matters to 1e-26 of them.
constexpr float kFoldBelow = 9.3132257e-10f;

// One row's channels [begin, begin + n): pointers into the state and inputs.
struct DecayRun {
  const AftDecayArgs& a;
  int64_t b, begin, n;
  int64_t slot() const { return SlotOf(a.slots, b); }
  float* state(float* base) const { return base + slot() * a.channels + begin; }
  float* ring(float* base, int64_t position) const {
    return base + (slot() * a.window + position % a.window) * a.channels + begin;
  }
  const float* input(const float* base, int64_t token) const {
    return base + b * a.row_stride + token * a.token_stride + begin;
  }
};

// Steps 1 and 2 of kernels.h for token position t.
ATTN_HOT void AgeAndEvict(const DecayRun& r, int64_t t) {
  const AftDecayArgs& a = r.a;
  const int64_t n = r.n;
  const float* decay = a.decay + r.begin;
  float* ref = r.state(a.ref);
  float* num = r.state(a.num);
  float* den = r.state(a.den);
  if (t < a.window) return;              // nothing has left the window: the sums are still empty
  const float* k = r.ring(a.ring_k, t);  // the key at t - window shares t's slot
  const float* v = r.ring(a.ring_v, t);
  int fold = 0;
#pragma omp simd reduction(| : fold)
  for (int64_t d = 0; d < n; ++d) {
    const float raised = std::max(ref[d], k[d]);
    const float scale = FastExp(ref[d] - raised) * decay[d];  // 0 while ref is -inf
    const float e = FastExp(k[d] - raised);
    num[d] = num[d] * scale + e * v[d];
    den[d] = den[d] * scale + e;
    ref[d] = raised;
    fold |= den[d] < kFoldBelow;
  }
  if (!fold) return;
  for (int64_t d = 0; d < n; ++d) {
    if (den[d] >= kFoldBelow || den[d] <= 0.0f) continue;
    ref[d] += std::log(den[d]);
    num[d] /= den[d];
    den[d] = 1.0f;
  }
}

// Step 4 for token position t, whose key is already in the ring; `bias` is
// u expanded to [window, channels] and `m` scratch for n floats.
ATTN_HOT void DecayOutput(const DecayRun& r, int64_t t, const float* q, const float* bias, float* m,
                          float* acc_num, float* acc_den, float* out) {
  const AftDecayArgs& a = r.a;
  const int64_t n = r.n, visible = std::min(t + 1, a.window);
  const float* ref = r.state(a.ref);
  const float* num = r.state(a.num);
  const float* den = r.state(a.den);
  std::copy_n(ref, n, m);
  for (int64_t delta = 0; delta < visible; ++delta) {
    const float* k = r.ring(a.ring_k, t - delta);
    const float* u = bias + delta * a.channels + r.begin;
#pragma omp simd
    for (int64_t d = 0; d < n; ++d) m[d] = std::max(m[d], k[d] + u[d]);
  }
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) {
    const float carried = FastExp(ref[d] - m[d]);  // m is finite: the newest key is in it
    acc_num[d] = num[d] * carried;
    acc_den[d] = den[d] * carried;
  }
  for (int64_t delta = 0; delta < visible; ++delta) {
    const float* k = r.ring(a.ring_k, t - delta);
    const float* v = r.ring(a.ring_v, t - delta);
    const float* u = bias + delta * a.channels + r.begin;
#pragma omp simd
    for (int64_t d = 0; d < n; ++d) {
      const float e = FastExp(k[d] + u[d] - m[d]);
      acc_num[d] += e * v[d];
      acc_den[d] += e;
    }
  }
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) out[d] = Sigmoid(q[d]) * acc_num[d] / acc_den[d];
}

// Every token of one row's run of channels.
void DecayRunTokens(const DecayRun& r, const float* bias) {
  const AftDecayArgs& a = r.a;
  float m[kChannelBlock], acc_num[kChannelBlock], acc_den[kChannelBlock];
  const int64_t start = a.lengths[r.slot()];
  for (int64_t j = 0; j < a.time; ++j) {
    const int64_t t = start + j;
    AgeAndEvict(r, t);
    std::copy_n(r.input(a.k, j), r.n, r.ring(a.ring_k, t));
    std::copy_n(r.input(a.v, j), r.n, r.ring(a.ring_v, t));
    if (j < a.first_output) continue;
    float* out = a.out + OutputToken(r.b, j, a.time, a.first_output) * a.channels + r.begin;
    DecayOutput(r, t, r.input(a.q, j), bias, m, acc_num, acc_den, out);
  }
}

}  // namespace

void AftDecay(const AftDecayArgs& a) {
  // u_h[delta] for every channel, so that the loops above read it like keys.
  std::vector<float> bias(a.window * a.channels);
  const int64_t width = a.channels / a.heads;
  for (int64_t delta = 0; delta < a.window; ++delta) {
    for (int64_t d = 0; d < a.channels; ++d) {
      bias[delta * a.channels + d] = a.bias[(d / width) * a.window + delta];
    }
  }
  const int64_t runs = (a.channels + kChannelBlock - 1) / kChannelBlock;
  const int64_t work = a.time * 3 * a.window * std::min(a.channels, kChannelBlock);
  at::parallel_for(0, a.batch * runs, GrainFor(work), [&](int64_t first, int64_t last) {
    for (int64_t task = first; task < last; ++task) {
      const int64_t b = task / runs, begin = (task % runs) * kChannelBlock;
      DecayRunTokens(DecayRun{a, b, begin, std::min(kChannelBlock, a.channels - begin)},
                     bias.data());
    }
  });
}

}  // namespace attn::kernels
