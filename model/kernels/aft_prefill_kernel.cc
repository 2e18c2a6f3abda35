// The AFT parallel form (kernels::AftPrefill, model/kernels/kernels.h): per row,
// per run of channels inside one bias head, block by block.
#include <ATen/Parallel.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "model/kernels/kernel_common.h"
#include "model/kernels/kernels.h"

namespace attn::kernels {

namespace {

// exp(w(t, delta)) of one bias head for delta < min(window, visible).
void ExpBiasRow(const AftPrefillArgs& a, int64_t head, int64_t t, int64_t visible, float* out) {
  const float* row = a.bias + (head * a.bias_rows + (a.bias_rows > 1 ? t : 0)) * a.window;
  for (int64_t delta = 0; delta < std::min(visible, a.window); ++delta) {
    out[delta] = FastExp(row[delta]);
  }
}

// Where the row's state and inputs for channels [begin, begin + n) live.
struct PrefillRun {
  const AftPrefillArgs& a;
  int64_t b, begin, n, head;
  const float* q(int64_t j) const { return a.q + b * a.row_stride + j * a.token_stride + begin; }
  const float* k(int64_t j) const { return a.k + b * a.row_stride + j * a.token_stride + begin; }
  const float* v(int64_t j) const { return a.v + b * a.row_stride + j * a.token_stride + begin; }
  int64_t slot() const { return SlotOf(a.slots, b); }
  float* state(float* base) const { return base + slot() * a.channels + begin; }
  // The ring entry of position p (slot layout: p mod window).
  float* ring(float* base, int64_t p) const {
    return base + (slot() * a.window + p % a.window) * a.channels + begin;
  }
};

// Query i of the block starting at token `first` (position t0 = start +
// first) on the exact path: y_i from the carried sums, the ring and keys
// first..first+i, relative to the query's own prefix maximum m_i, so each
// (query, key) pair computes its own exponential.
ATTN_HOT void AftPrefillQuery(const PrefillRun& r, int64_t first, int64_t i, const float* m,
                              const float* exp_bias, float* acc_num, float* acc_den) {
  const AftPrefillArgs& a = r.a;
  const int64_t n = r.n, t0 = a.start + first, t = t0 + i;
  const float* c = r.state(a.c);
  const float* num = r.state(a.num);
  const float* den = r.state(a.den);
  std::copy_n(num, n, acc_num);
  std::copy_n(den, n, acc_den);
  for (int64_t p = t0 - std::min(a.window, t0); p < t0; ++p) {  // the ring, relative to c
    const float f = t - p < a.window ? exp_bias[t - p] : 1.0f;
    AddScaled(f, r.ring(a.ring_ekv, p), n, acc_num);
    AddScaled(f, r.ring(a.ring_ek, p), n, acc_den);
  }
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) {
    const float carried = FastExp(c[d] - m[d]);  // 0 while c is -inf
    acc_num[d] *= carried;
    acc_den[d] *= carried;
  }
  for (int64_t j = 0; j <= i; ++j) {  // the block's keys, relative to m_i
    const float f = i - j < a.window ? exp_bias[i - j] : 1.0f;
    const float* k = r.k(first + j);
    const float* v = r.v(first + j);
#pragma omp simd
    for (int64_t d = 0; d < n; ++d) {
      const float w = f * FastExp(k[d] - m[d]);
      acc_num[d] += w * v[d];
      acc_den[d] += w;
    }
  }
  const float* q = r.q(first + i);
  float* out = a.out + OutputToken(r.b, first + i, a.time, a.first_output) * a.channels + r.begin;
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) out[d] = Sigmoid(q[d]) * acc_num[d] / acc_den[d];
}

// How far (in nats) a block's maximum may rise above its first query's
// prefix maximum for every query to take its sums relative to the block's
// maximum. num/den does not depend on the reference, but each query's terms
// shrink by exp(m_i - max), here by at most e^-40 = 4e-18, while float's
// normal range reaches e^-87: a query loses precision only if its largest
// term was below e^-47 already (a bias w < -47, a weight the model treats as
// zero). In the bundled aft-conv model most blocks rise by more than 16 and
// nearly all by less than 40; keys of magnitude 1000 take the exact path.
constexpr float kSharedMaxRise = 40.0f;

// The block's maximum over c and keys first..first+count-1, into
// `block_max`; returns whether it rises at most kSharedMaxRise above
// max(c, k_first) in every channel.
ATTN_HOT bool BlockMaxIsShareable(const PrefillRun& r, int64_t first, int64_t count,
                                  float* block_max) {
  const float* c = r.state(r.a.c);
  const float* k0 = r.k(first);
  float lowest[kChannelBlock];
  for (int64_t d = 0; d < r.n; ++d) lowest[d] = block_max[d] = k0[d] > c[d] ? k0[d] : c[d];
  for (int64_t j = 1; j < count; ++j) {
    const float* k = r.k(first + j);
    for (int64_t d = 0; d < r.n; ++d) block_max[d] = k[d] > block_max[d] ? k[d] : block_max[d];
  }
  bool shareable = true;
  for (int64_t d = 0; d < r.n; ++d) shareable &= block_max[d] - lowest[d] <= kSharedMaxRise;
  return shareable;
}

// Moves the running maximum c to `m` and rescales the carried sums with it;
// scale[d] = exp(c_old - m), 0 while c is -inf.
ATTN_INLINE void MoveCarriedSums(const PrefillRun& r, const float* m, float* scale) {
  float* c = r.state(r.a.c);
  float* num = r.state(r.a.num);
  float* den = r.state(r.a.den);
#pragma omp simd
  for (int64_t d = 0; d < r.n; ++d) {
    scale[d] = FastExp(c[d] - m[d]);
    c[d] = m[d];
    num[d] *= scale[d];
    den[d] *= scale[d];
  }
}

// Where AftPrefillSharedBlock lays out the keys a block's queries see:
// rows of kChannelBlock floats, exp(k - block max) for `rows` keys, then the
// same times v.
struct KeyTerms {
  float* e;
  float* ev;
  KeyTerms(std::vector<float>& scratch, int64_t rows)
      : e(scratch.data()), ev(scratch.data() + rows * kChannelBlock) {}
  float* e_row(int64_t j) const { return e + j * kChannelBlock; }
  float* ev_row(int64_t j) const { return ev + j * kChannelBlock; }
};

// The block [first, first + count) when its maximum is shareable
// (BlockMaxIsShareable): every sum is taken relative to the block's maximum,
// and the state moves past the block. Relative to it, the keys are, oldest
// first: the carried sums (every key before the ring), the `ring` keys of
// the ring and the block's own. A key at an offset of `window` or more from
// the query has factor 1, so those keys form running sums that take one more
// key per query; only the window's keys take bias factors. A query costs
// window + 1 key terms wherever it sits in the block, and the running sums
// after the last query are the new carried sums.
ATTN_HOT void AftPrefillSharedBlock(const PrefillRun& r, int64_t first, int64_t count,
                                    const float* block_max, bool per_position, float* exp_bias,
                                    std::vector<float>& scratch) {
  const AftPrefillArgs& a = r.a;
  const int64_t n = r.n, w = a.window, t0 = a.start + first, ring = std::min(w, t0);
  const int64_t keys = ring + count;  // key j is at position t0 - ring + j
  scratch.resize(2 * keys * kChannelBlock);
  const KeyTerms terms(scratch, keys);
  float* num = r.state(a.num);
  float* den = r.state(a.den);
  float scale[kChannelBlock];
  MoveCarriedSums(r, block_max, scale);
  for (int64_t j = 0; j < ring; ++j) {
    const float* ek = r.ring(a.ring_ek, t0 - ring + j);
    const float* ekv = r.ring(a.ring_ekv, t0 - ring + j);
    float* e = terms.e_row(j);
    float* ev = terms.ev_row(j);
#pragma omp simd
    for (int64_t d = 0; d < n; ++d) {
      e[d] = ek[d] * scale[d];
      ev[d] = ekv[d] * scale[d];
    }
  }
  for (int64_t j = 0; j < count; ++j) {
    const float* k = r.k(first + j);
    const float* v = r.v(first + j);
    float* e = terms.e_row(ring + j);
    float* ev = terms.ev_row(ring + j);
#pragma omp simd
    for (int64_t d = 0; d < n; ++d) {
      e[d] = FastExp(k[d] - block_max[d]);
      ev[d] = e[d] * v[d];
    }
  }
  float acc_num[kChannelBlock], acc_den[kChannelBlock];
  for (int64_t i = 0; i < count; ++i) {
    const int64_t newest = ring + i;  // the query's own key
    if (newest >= w) {                // the key at offset `window` joins the running sums
      AddScaled(1.0f, terms.ev_row(newest - w), n, num);
      AddScaled(1.0f, terms.e_row(newest - w), n, den);
    }
    if (first + i < a.first_output) continue;
    if (per_position) ExpBiasRow(a, r.head, t0 + i, t0 + i + 1, exp_bias);
#pragma omp simd
    for (int64_t d = 0; d < n; ++d) {  // a loop: copy_n of a few floats calls memmove
      acc_num[d] = num[d];
      acc_den[d] = den[d];
    }
    for (int64_t delta = 0; delta < std::min(w, newest + 1); ++delta) {
      AddScaled(exp_bias[delta], terms.ev_row(newest - delta), n, acc_num);
      AddScaled(exp_bias[delta], terms.e_row(newest - delta), n, acc_den);
    }
    const float* q = r.q(first + i);
    float* out = a.out + OutputToken(r.b, first + i, a.time, a.first_output) * a.channels + r.begin;
#pragma omp simd
    for (int64_t d = 0; d < n; ++d) out[d] = Sigmoid(q[d]) * acc_num[d] / acc_den[d];
  }
  // The ring keeps the last min(window, keys) keys, rescaled or new.
  for (int64_t j = std::max<int64_t>(0, keys - w); j < keys; ++j) {
    const float* e = terms.e_row(j);
    const float* ev = terms.ev_row(j);
    float* ek = r.ring(a.ring_ek, t0 - ring + j);
    float* ekv = r.ring(a.ring_ekv, t0 - ring + j);
#pragma omp simd
    for (int64_t d = 0; d < n; ++d) {
      ek[d] = e[d];
      ekv[d] = ev[d];
    }
  }
}

// Moves the state past the block [first, first + count): everything is
// rescaled to the new max, the keys enter the ring, and the keys that leave
// the window join the carried sums.
ATTN_HOT void AftPrefillAdvance(const PrefillRun& r, int64_t first, int64_t count, const float* m) {
  const AftPrefillArgs& a = r.a;
  const int64_t n = r.n, t0 = a.start + first;
  const float* c = r.state(a.c);
  float* num = r.state(a.num);
  float* den = r.state(a.den);
  float scale[kChannelBlock];
  MoveCarriedSums(r, m, scale);
  for (int64_t p = t0 - std::min(a.window, t0); p < t0; ++p) {
    float* ek = r.ring(a.ring_ek, p);
    float* ekv = r.ring(a.ring_ekv, p);
#pragma omp simd
    for (int64_t d = 0; d < n; ++d) {
      ek[d] *= scale[d];
      ekv[d] *= scale[d];
    }
  }
  for (int64_t j = 0; j < count; ++j) {
    const int64_t p = t0 + j;
    const float* k = r.k(first + j);
    const float* v = r.v(first + j);
    if (a.window == 0) {  // aft-simple: straight into the sums
#pragma omp simd
      for (int64_t d = 0; d < n; ++d) {
        const float e = FastExp(k[d] - c[d]);
        num[d] += e * v[d];
        den[d] += e;
      }
      continue;
    }
    float* ek = r.ring(a.ring_ek, p);  // holds position p - window, if any
    float* ekv = r.ring(a.ring_ekv, p);
    const bool evicts = p >= a.window;
#pragma omp simd
    for (int64_t d = 0; d < n; ++d) {
      if (evicts) {
        num[d] += ekv[d];
        den[d] += ek[d];
      }
      ek[d] = FastExp(k[d] - c[d]);
      ekv[d] = ek[d] * v[d];
    }
  }
}

void AftPrefillRunAll(const PrefillRun& r) {
  const AftPrefillArgs& a = r.a;
  const float* c = r.state(a.c);
  float m[kChannelBlock], block_max[kChannelBlock], acc_num[kChannelBlock], acc_den[kChannelBlock];
  std::vector<float> exp_bias(std::max<int64_t>(a.window, 1));
  std::vector<float> key_terms;  // AftPrefillSharedBlock's scratch
  // One bias row (aft-conv): its factors hold for every query.
  const bool per_position = a.window > 0 && a.bias_rows > 1;
  if (a.window > 0 && !per_position) ExpBiasRow(a, r.head, 0, a.window, exp_bias.data());
  for (int64_t first = 0; first < a.time; first += a.block) {
    const int64_t count = std::min(a.block, a.time - first);
    const int64_t t0 = a.start + first;
    if (BlockMaxIsShareable(r, first, count, block_max)) {
      AftPrefillSharedBlock(r, first, count, block_max, per_position, exp_bias.data(), key_terms);
      continue;
    }
    std::copy_n(c, r.n, m);  // each query's prefix maximum
    for (int64_t i = 0; i < count; ++i) {
      const float* k = r.k(first + i);
      for (int64_t d = 0; d < r.n; ++d) m[d] = k[d] > m[d] ? k[d] : m[d];
      if (first + i < a.first_output) continue;  // no output wanted: the max is all it needs
      // Offsets up to i + ring reach back to the oldest key the query sees.
      if (per_position) ExpBiasRow(a, r.head, t0 + i, t0 + i + 1, exp_bias.data());
      AftPrefillQuery(r, first, i, m, exp_bias.data(), acc_num, acc_den);
    }
    AftPrefillAdvance(r, first, count, m);
  }
}

// How many runs each bias head's `group` channels split into: at most
// kChannelBlock channels each, and more, down to 16 channels, until every
// thread gets as many runs. One head of 160 channels made runs of 64, 64 and
// 32, two for one thread and one for the other; in four runs of 40, AFT-full
// prefills 256-token chunks at d_model 160 in 0.94 of the time (AFT-local
// and AFT-simple, whose runs cost about the same at any width, unchanged).
int64_t RunsPerHead(int64_t group, int64_t tasks_per_run) {
  const int64_t threads = at::get_num_threads();
  int64_t runs = (group + kChannelBlock - 1) / kChannelBlock;
  while ((tasks_per_run * runs) % threads != 0 && group / (runs + 1) >= 16) ++runs;
  return runs;
}

}  // namespace

void AftPrefill(const AftPrefillArgs& a) {
  // Runs of channels inside one bias head, so that a (query, key) pair has
  // one bias factor per run.
  std::vector<std::pair<int64_t, int64_t>> runs;  // [begin, end)
  const int64_t group = a.channels / a.bias_heads;
  const int64_t per_head = RunsPerHead(group, a.batch * a.bias_heads);
  for (int64_t h = 0; h < a.bias_heads; ++h) {
    for (int64_t r = 0; r < per_head; ++r) {
      runs.emplace_back(h * group + group * r / per_head, h * group + group * (r + 1) / per_head);
    }
  }
  const auto per_row = static_cast<int64_t>(runs.size());
  const int64_t work = a.time * (std::min(a.block, a.time) + a.window) * kChannelBlock;
  at::parallel_for(0, a.batch * per_row, GrainFor(work), [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const auto [first, last] = runs[task % per_row];
      AftPrefillRunAll(PrefillRun{a, task / per_row, first, last - first, first / group});
    }
  });
}

}  // namespace attn::kernels
