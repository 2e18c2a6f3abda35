#include "model/kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

// Each hot per-row function is compiled for AVX-512, AVX2+FMA and baseline
// x86-64; the loader picks the best the CPU has, so one binary serves any
// x86-64 machine. The reductions that may be reordered to vectorise say so
// with `omp simd reduction` (-fopenmp-simd: no OpenMP runtime); elsewhere
// float arithmetic keeps its order.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ATTN_HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ATTN_HOT
#endif

namespace attn::kernels {
namespace {

// Below this many multiply-adds a task list runs on the calling thread: an
// OpenMP fork/join costs several microseconds, more than a small step.
constexpr int64_t kParallelWork = 1 << 15;

int64_t GrainFor(int64_t work_per_task) {
  return std::max<int64_t>(1, kParallelWork / std::max<int64_t>(1, work_per_task));
}

inline int64_t SlotOf(const int64_t* slots, int64_t b) { return slots ? slots[b] : b; }

inline float Dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// exp(x) within 2 ulp for x in [-87, 88], 0 below, +inf above; free of
// branches and calls so that loops over it vectorise (std::exp does not).
// Range reduction x = n ln2 + r, |r| <= ln2/2, then a degree-6 polynomial
// for e^r (the classic Cephes expf coefficients) and 2^n from the exponent
// bits.
inline float FastExp(float x) {
  const float clamped = std::min(std::max(x, -87.0f), 88.0f);
  const float n = std::floor(clamped * 1.44269504088896341f + 0.5f);
  float r = clamped - n * 0.693359375f;
  r -= n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  const float y = er * scale;
  return x < -87.0f ? 0.0f : (x > 88.0f ? std::numeric_limits<float>::infinity() : y);
}

inline float Sigmoid(float x) { return 1.0f / (1.0f + FastExp(-x)); }

// phi of linear attention, written to `out`.
inline void FeatureMap(const float* x, int64_t n, bool exp_feature, float* out) {
  if (exp_feature) {
    float max = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : max)
    for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
    for (int64_t i = 0; i < n; ++i) out[i] = FastExp(x[i] - max);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.0f ? x[i] + 1.0f : FastExp(x[i]);
  }
}

ATTN_HOT void AttendOneHead(const CachedAttentionArgs& a, int64_t b, int64_t h, std::vector<float>& scratch) {
  const int64_t dh = a.head_dim;
  const int64_t slot = SlotOf(a.slots, b);
  const int64_t length = a.lengths[slot];
  const int64_t row = (slot * a.heads + h) * a.capacity * dh;
  const float* keys = a.k_cache + row;
  const float* values = a.v_cache + row;
  const float* q = a.q + b * a.q_stride + h * dh;
  const float slope = a.slopes ? a.slopes[h] : 0.0f;

  scratch.resize(length + 1 + 2 * dh);
  float* scores = scratch.data();
  float* qc = scores + length + 1;
  float* qp = qc + dh;
  for (int64_t i = 0; i < dh; ++i) {
    qc[i] = q[i] + (a.content_bias ? a.content_bias[h * dh + i] : 0.0f);
    qp[i] = a.r ? q[i] + a.position_bias[h * dh + i] : 0.0f;
  }
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j <= length; ++j) {
    float s = Dot(qc, keys + j * dh, dh);
    if (a.r) s += Dot(qp, a.r + ((length - j) * a.heads + h) * dh, dh);
    s = s * a.scale - slope * static_cast<float>(length - j);
    scores[j] = s;
    max = std::max(max, s);
  }
  float total = 0.0f;
#pragma omp simd reduction(+ : total)
  for (int64_t j = 0; j <= length; ++j) {
    scores[j] = FastExp(scores[j] - max);
    total += scores[j];
  }
  float* out = a.out + (b * a.heads + h) * dh;
  std::fill(out, out + dh, 0.0f);
  const float inv_total = 1.0f / total;
  for (int64_t j = 0; j <= length; ++j) {
    const float p = scores[j] * inv_total;
    const float* v = values + j * dh;
    for (int64_t i = 0; i < dh; ++i) out[i] += p * v[i];
  }
}

ATTN_HOT void LinearOneHead(const LinearStepArgs& a, int64_t b, int64_t h, std::vector<float>& scratch) {
  const int64_t dh = a.head_dim;
  const int64_t slot = SlotOf(a.slots, b);
  const int64_t in = b * a.stride + h * dh;
  scratch.resize(2 * dh);
  float* phi_q = scratch.data();
  float* phi_k = scratch.data() + dh;
  FeatureMap(a.q + in, dh, a.exp_feature, phi_q);
  FeatureMap(a.k + in, dh, a.exp_feature, phi_k);
  const float* v = a.v + in;
  float* s = a.s + (slot * a.heads + h) * dh * dh;
  float* z = a.z + (slot * a.heads + h) * dh;
  float* out = a.out + (b * a.heads + h) * dh;

  // One pass over S: update row i, then read it into the numerator.
  std::fill(out, out + dh, 0.0f);
  float den = 0.0f;
  for (int64_t i = 0; i < dh; ++i) {
    float* s_row = s + i * dh;
    const float pk = phi_k[i];
    const float pq = phi_q[i];
    for (int64_t j = 0; j < dh; ++j) {
      s_row[j] += pk * v[j];
      out[j] += pq * s_row[j];
    }
    z[i] += pk;
    den += pq * z[i];
  }
  const float inv = 1.0f / (den + a.eps);
  for (int64_t j = 0; j < dh; ++j) out[j] *= inv;
}

// Raises the running max c to include k and rescales the sums kept relative
// to it; scale[d] is exp(c_old - c_new), exactly 1 where c did not move.
// Returns true if any channel's max grew.
inline bool RaiseRunningMax(const float* k, int64_t d_model, float* c, float* num, float* den,
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

ATTN_HOT void AftOneSequence(const AftStepArgs& a, int64_t b, std::vector<float>& scratch) {
  const int64_t dm = a.channels;
  const int64_t w = a.window;
  const int64_t slot = SlotOf(a.slots, b);
  const int64_t t = a.lengths[slot];
  const float* q = a.q + b * a.stride;
  const float* k = a.k + b * a.stride;
  const float* v = a.v + b * a.stride;
  float* c = a.c + slot * dm;
  float* num = a.num + slot * dm;
  float* den = a.den + slot * dm;
  float* ring_ek = w > 0 ? a.ring_ek + slot * w * dm : nullptr;
  float* ring_ekv = w > 0 ? a.ring_ekv + slot * w * dm : nullptr;

  scratch.resize(3 * dm + a.bias_heads * std::max<int64_t>(w, 1));
  float* scale = scratch.data();
  float* acc_num = scale + dm;
  float* acc_den = acc_num + dm;
  float* exp_bias = acc_den + dm;

  // The key at t - w leaves the window now: it joins the carried sums with
  // bias 0. It sits in the ring slot the new key takes.
  if (w > 0 && t >= w) {
    const float* ek = ring_ek + (t % w) * dm;
    const float* ekv = ring_ekv + (t % w) * dm;
    for (int64_t d = 0; d < dm; ++d) {
      num[d] += ekv[d];
      den[d] += ek[d];
    }
  }
  if (RaiseRunningMax(k, dm, c, num, den, scale) && w > 0) {
    for (int64_t r = 0; r < w; ++r) {
      float* ek = ring_ek + r * dm;
      float* ekv = ring_ekv + r * dm;
      for (int64_t d = 0; d < dm; ++d) {
        ek[d] *= scale[d];
        ekv[d] *= scale[d];
      }
    }
  }
  if (w == 0) {
    for (int64_t d = 0; d < dm; ++d) {
      const float e = FastExp(k[d] - c[d]);
      num[d] += e * v[d];
      den[d] += e;
      a.out[b * dm + d] = Sigmoid(q[d]) * num[d] / den[d];
    }
    return;
  }
  float* ek_new = ring_ek + (t % w) * dm;
  float* ekv_new = ring_ekv + (t % w) * dm;
  for (int64_t d = 0; d < dm; ++d) {
    ek_new[d] = FastExp(k[d] - c[d]);
    ekv_new[d] = ek_new[d] * v[d];
  }
  const int64_t visible = std::min(t + 1, w);
  const int64_t bias_row = a.bias_rows > 1 ? t : 0;
  for (int64_t h = 0; h < a.bias_heads; ++h) {
    const float* bias = a.bias + (h * a.bias_rows + bias_row) * w;
    for (int64_t delta = 0; delta < visible; ++delta) {
      exp_bias[h * w + delta] = FastExp(bias[delta]);
    }
  }
  std::copy(num, num + dm, acc_num);
  std::copy(den, den + dm, acc_den);
  const int64_t group = dm / a.bias_heads;
  for (int64_t delta = 0; delta < visible; ++delta) {
    const int64_t r = (t - delta) % w;
    const float* ek = ring_ek + r * dm;
    const float* ekv = ring_ekv + r * dm;
    for (int64_t h = 0; h < a.bias_heads; ++h) {
      const float e = exp_bias[h * w + delta];
      for (int64_t d = h * group; d < (h + 1) * group; ++d) {
        acc_num[d] += e * ekv[d];
        acc_den[d] += e * ek[d];
      }
    }
  }
  for (int64_t d = 0; d < dm; ++d) {
    a.out[b * dm + d] = Sigmoid(q[d]) * acc_num[d] / acc_den[d];
  }
}

}  // namespace

void CachedAttentionStep(const CachedAttentionArgs& a) {
  const int64_t tasks = a.batch * a.heads;
  int64_t longest = 1;
  for (int64_t b = 0; b < a.batch; ++b) longest = std::max(longest, a.lengths[SlotOf(a.slots, b)] + 1);
  const int64_t work = longest * a.head_dim * (a.r ? 3 : 2);
  at::parallel_for(0, tasks, GrainFor(work), [&](int64_t begin, int64_t end) {
    std::vector<float> scratch;
    for (int64_t task = begin; task < end; ++task) {
      AttendOneHead(a, task / a.heads, task % a.heads, scratch);
    }
  });
}

void AppendToCache(int64_t batch, int64_t heads, int64_t head_dim, int64_t capacity,
                   const int64_t* slots, const int64_t* lengths, const float* k, const float* v,
                   int64_t stride, float* k_cache, float* v_cache) {
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t slot = SlotOf(slots, b);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t at = ((slot * heads + h) * capacity + lengths[slot]) * head_dim;
      std::copy_n(k + b * stride + h * head_dim, head_dim, k_cache + at);
      std::copy_n(v + b * stride + h * head_dim, head_dim, v_cache + at);
    }
  }
}

float Exp(float x) { return FastExp(x); }

void AdvanceLengths(int64_t batch, const int64_t* slots, int64_t* lengths) {
  for (int64_t b = 0; b < batch; ++b) ++lengths[SlotOf(slots, b)];
}

void LinearAttentionStep(const LinearStepArgs& a) {
  const int64_t tasks = a.batch * a.heads;
  const int64_t work = 2 * a.head_dim * a.head_dim;
  at::parallel_for(0, tasks, GrainFor(work), [&](int64_t begin, int64_t end) {
    std::vector<float> scratch;
    for (int64_t task = begin; task < end; ++task) {
      LinearOneHead(a, task / a.heads, task % a.heads, scratch);
    }
  });
}

void AftStep(const AftStepArgs& a) {
  const int64_t work = (2 * a.window + 4) * a.channels;
  at::parallel_for(0, a.batch, GrainFor(work), [&](int64_t begin, int64_t end) {
    std::vector<float> scratch;
    for (int64_t b = begin; b < end; ++b) AftOneSequence(a, b, scratch);
  });
}

}  // namespace attn::kernels
