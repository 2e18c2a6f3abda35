// The step kernels' arithmetic (model/cuda/step_math.h) on the CPU: every
// block, warp channel and lane as the kernels run them, the lanes' parts
// summed in place of the warp's shuffles, against the recurrences of
// model/mixers/rwkv7.h (its scan), rwkv4.h, linear_attention.h,
// aft_decay.h and aft.h, and softmax attention over a cache (kv_cache.h),
// written here in float64 (Mamba-2's and RWKV-7's steps:
// cuda_step_rows_math_test.cc). Sizes are not multiples of the warp, so the
// indexing is what is checked; the launch itself runs on a GPU
// (device_tests there, with and without the kernels).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "model/cuda/step_math.h"
#include "tests/cuda_math_test_util.h"

namespace attn {
namespace {

using cuda::kWarp;
using cuda_test::ExpectClose;
using cuda_test::Random;
using cuda_test::Unwritten;

// The scan (cuda::Rwkv7Scan): every token of a chunk with S in place, the
// inputs time-major, outputs only from token first_output on, against the
// delta rule token after token in float64.
TEST(CudaStepMath, Rwkv7ScanFollowsTheDeltaRuleOverAChunk) {
  const int64_t batch = 2, heads = 3, n = 40, channels = heads * n, time = 5, first = 2;
  const int64_t inputs = time * batch * channels, outputs = (time - first) * batch * channels;
  std::mt19937 gen(17);
  const auto r = Random(outputs, -1, 1, gen), w = Random(inputs, 0.55f, 1, gen);
  const auto k = Random(inputs, -1, 1, gen), v = Random(inputs, -1, 1, gen);
  const auto kk = Random(inputs, -0.3f, 0.3f, gen), iclr = Random(inputs, 0, 1, gen);
  const auto s0 = Random(batch * heads * n * n, -1, 1, gen);
  auto s = s0;
  auto o = Unwritten(outputs);
  cuda::Rwkv7ScanArgs a;
  a.batch = batch, a.time = time, a.heads = heads, a.head_dim = n, a.first_output = first;
  a.r = r.data(), a.w = w.data(), a.k = k.data(), a.v = v.data(), a.kk = kk.data();
  a.iclr = iclr.data(), a.s = s.data(), a.o = o.data();
  for (int64_t block = 0; block < batch * heads; ++block) {
    for (int64_t t = 0; t < time; ++t) {
      const cuda::Rwkv7StepArgs step = cuda::Rwkv7TokenArgs(a, t);
      EXPECT_EQ(step.r != nullptr, t >= first);
      for (int64_t i = 0; i < n; ++i) {
        float removed = 0.f, out = 0.f;
        for (int lane = 0; lane < kWarp; ++lane)
          removed += cuda::Rwkv7RemovedPart(step, block, i, lane);
        for (int lane = 0; lane < kWarp; ++lane) {
          out += cuda::Rwkv7UpdatePart(step, block, i, lane, removed);
        }
        if (step.r != nullptr) o[cuda::Rwkv7ScanOutputAt(a, block, t, i)] = out;
      }
    }
  }
  for (int64_t row = 0; row < batch; ++row) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t block = row * heads + h;
      std::vector<double> state(s0.begin() + block * n * n, s0.begin() + (block + 1) * n * n);
      for (int64_t t = 0; t < time; ++t) {
        const int64_t c0 = (t * batch + row) * channels + h * n;  // [T, B, C]
        for (int64_t i = 0; i < n; ++i) {
          double removed = 0, out = 0;
          for (int64_t j = 0; j < n; ++j) removed += state[i * n + j] * kk[c0 + j];
          for (int64_t j = 0; j < n; ++j) {
            double& cell = state[i * n + j];
            cell = cell * w[c0 + j] - removed * kk[c0 + j] * iclr[c0 + j] +
                   static_cast<double>(v[c0 + i]) * k[c0 + j];
            if (t >= first) out += cell * r[((t - first) * batch + row) * channels + h * n + j];
          }
          if (t < first) continue;
          const int64_t at =
              (row * (time - first) + t - first) * channels + h * n + i;  // [B, T', C]
          ExpectClose(o[at], out, "o", at);
        }
      }
      for (int64_t at = 0; at < n * n; ++at) {
        ExpectClose(s[block * n * n + at], state[at], "S", block * n * n + at);
      }
    }
  }
}

// RWKV-4's WKV (cuda::Rwkv4Wkv): each (row, channel) over a chunk in the
// stable form, against the plain sums e^p num and e^p den in float64; the
// last row starts empty (max -1e38).
TEST(CudaStepMath, Rwkv4ChannelsFollowTheSums) {
  const int64_t batch = 3, c = 37, time = 6, first = 2, outputs = time - first;
  std::mt19937 gen(19);
  const auto k = Random(batch * time * c, -2, 2, gen), v = Random(batch * time * c, -1, 1, gen);
  const auto decay = Random(c, -2, -0.05f, gen), u = Random(c, -1, 1, gen);
  auto num = Random(batch * c, -1, 1, gen), den = Random(batch * c, 0.1f, 2, gen);
  auto max = Random(batch * c, -2, 2, gen);
  for (int64_t d = 0; d < c; ++d) num[2 * c + d] = 0, den[2 * c + d] = 0, max[2 * c + d] = -1e38f;
  const auto num0 = num, den0 = den, max0 = max;
  auto out = Unwritten(batch * outputs * c);
  cuda::Rwkv4WkvArgs a;
  a.batch = batch, a.time = time, a.channels = c, a.first_output = first;
  a.k = k.data(), a.v = v.data(), a.decay = decay.data(), a.first = u.data();
  a.num = num.data(), a.den = den.data(), a.max = max.data(), a.out = out.data();
  for (int64_t row = 0; row < batch; ++row) {
    for (int64_t d = 0; d < c; ++d) cuda::Rwkv4Channel(a, row, d);
  }
  for (int64_t row = 0; row < batch; ++row) {
    for (int64_t d = 0; d < c; ++d) {
      const int64_t at = row * c + d;
      const double scale = std::exp(static_cast<double>(max0[at]));  // 0 for the empty row
      double sum_v = num0[at] * scale, sum = den0[at] * scale;
      for (int64_t t = 0; t < time; ++t) {
        const double kt = k[(row * time + t) * c + d], vt = v[(row * time + t) * c + d];
        if (t >= first) {
          const double now = std::exp(u[d] + kt);
          const int64_t o = (row * outputs + t - first) * c + d;
          ExpectClose(out[o], (sum_v + now * vt) / (sum + now), "wkv", o);
        }
        sum_v = std::exp(static_cast<double>(decay[d])) * sum_v + std::exp(kt) * vt;
        sum = std::exp(static_cast<double>(decay[d])) * sum + std::exp(kt);
      }
      const double held = std::exp(static_cast<double>(max[at]));
      ExpectClose(num[at] * held, sum_v, "num", at);
      ExpectClose(den[at] * held, sum, "den", at);
    }
  }
}

// phi(x)_c in float64: elu(x) + 1, or exp(x_c - max x) over the head.
double Feature(const float* x, int64_t n, int64_t c, bool exp_feature) {
  if (!exp_feature) return x[c] > 0 ? x[c] + 1.0 : std::exp(static_cast<double>(x[c]));
  double top = x[0];
  for (int64_t i = 1; i < n; ++i) top = std::max(top, static_cast<double>(x[i]));
  return std::exp(x[c] - top);
}

// Rows of a pool named by scattered slots, updated in place: the others
// keep their state. Each feature map, with and without decay.
TEST(CudaStepMath, LinearThreadsUpdateTheirPoolRows) {
  const int64_t batch = 3, heads = 3, n = 37, d = heads * n, rows = 5;
  const std::vector<int64_t> slots = {3, 0, 2};
  for (const bool exp_feature : {false, true}) {
    for (const bool decayed : {false, true}) {
      SCOPED_TRACE(std::string(exp_feature ? "exp" : "elu") + (decayed ? ", decayed" : ""));
      std::mt19937 gen(17);
      const auto qkv = Random(batch * 3 * d, -3, 3, gen), decay = Random(heads, 0.9f, 1, gen);
      const auto s_in = Random(rows * heads * n * n, -1, 1, gen);
      const auto z_in = Random(rows * heads * n, 0, 5, gen);
      auto s = s_in, z = z_in, out = Unwritten(batch * d);
      cuda::LinearStepArgs a;
      a.batch = batch, a.heads = heads, a.head_dim = n, a.exp_feature = exp_feature;
      a.eps = 1e-6f, a.qkv = qkv.data(), a.decay = decayed ? decay.data() : nullptr;
      a.slots = slots.data(), a.s = s.data(), a.z = z.data(), a.out = out.data();
      std::vector<float> shared(3 * n);
      for (int64_t block = 0; block < batch * heads; ++block) {
        for (int64_t c = 0; c < n; ++c) cuda::LinearKeyChannel(a, block, c, shared.data());
        for (int64_t e = 0; e < n; ++e) cuda::LinearValueColumn(a, block, e, shared.data());
      }
      // S = g S + phi(k) v^T, z = g z + phi(k), y = phi(q)^T S / (phi(q)^T z + eps)
      std::vector<bool> stepped(rows, false);
      for (int64_t b = 0; b < batch; ++b) {
        stepped[slots[b]] = true;
        for (int64_t h = 0; h < heads; ++h) {
          const float* q = qkv.data() + b * 3 * d + h * n;
          const float *k = q + d, *v = q + 2 * d;
          const double g = decayed ? decay[h] : 1.0;
          const int64_t state = slots[b] * heads + h;
          double den = a.eps;
          for (int64_t c = 0; c < n; ++c) {
            const double z_c = g * z_in[state * n + c] + Feature(k, n, c, exp_feature);
            ExpectClose(z[state * n + c], z_c, "z", state * n + c);
            den += Feature(q, n, c, exp_feature) * z_c;
          }
          for (int64_t e = 0; e < n; ++e) {
            double num = 0;
            for (int64_t c = 0; c < n; ++c) {
              const int64_t at = (state * n + c) * n + e;
              const double s_ce = g * s_in[at] + Feature(k, n, c, exp_feature) * v[e];
              ExpectClose(s[at], s_ce, "S", at);
              num += Feature(q, n, c, exp_feature) * s_ce;
            }
            ExpectClose(out[b * d + h * n + e], num / den, "y", b * d + h * n + e);
          }
        }
      }
      for (int64_t row = 0; row < rows; ++row) {
        if (stepped[row]) continue;
        const int64_t first = row * heads * n;
        for (int64_t i = first; i < first + heads * n; ++i) ASSERT_EQ(z[i], z_in[i]) << i;
        for (int64_t i = first * n; i < (first + heads * n) * n; ++i) {
          ASSERT_EQ(s[i], s_in[i]) << i;
        }
      }
    }
  }
}

// aft-decay at four positions at once (short of the window, at it, past it,
// a fresh row), on scattered pool rows whose ring slots that hold no key
// yet are filled with 1e30 (reading one overflows). The carried sums are
// compared as exp(ref) num and exp(ref) den, what they stand for: any
// reference gives the same sums.
TEST(CudaStepMath, AftDecayThreadsFollowTheRecurrence) {
  const int64_t batch = 4, d = 10, heads = 2, s = 4, rows = 5;
  const std::vector<int64_t> slots = {3, 0, 2, 4}, lengths = {2, 7, 4, 9, 0};
  std::mt19937 gen(19);
  const auto qkv = Random(batch * 3 * d, -3, 3, gen), decay = Random(d, 0.5f, 1, gen);
  const auto bias = Random(heads * s, -1, 1, gen);
  auto ring_k = Random(rows * s * d, -3, 3, gen), ring_v = Random(rows * s * d, -2, 2, gen);
  auto ref = Random(rows * d, -1, 1, gen), num = Random(rows * d, -1, 1, gen);
  auto den = Random(rows * d, 0.5f, 2, gen);
  auto delta_of = [&](int64_t t, int64_t j) { return ((t - 1 - j) % s + s) % s + 1; };
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t j = 0; j < s; ++j) {
      if (delta_of(lengths[row], j) <= lengths[row]) continue;  // no key yet
      for (int64_t c = 0; c < d; ++c) ring_k[(row * s + j) * d + c] = 1e30f;
    }
    if (lengths[row] > s) continue;  // nothing has left the window yet
    for (int64_t c = 0; c < d; ++c) {
      ref[row * d + c] = -std::numeric_limits<float>::infinity();
      num[row * d + c] = den[row * d + c] = 0;
    }
  }
  const auto ring_k0 = ring_k, ring_v0 = ring_v, ref0 = ref, num0 = num, den0 = den;
  auto out = Unwritten(batch * d);
  cuda::AftDecayStepArgs a;
  a.batch = batch, a.channels = d, a.heads = heads, a.window = s, a.qkv = qkv.data();
  a.decay = decay.data(), a.bias = bias.data(), a.slots = slots.data(), a.lengths = lengths.data();
  a.ref = ref.data(), a.num = num.data(), a.den = den.data(), a.ring_k = ring_k.data();
  a.ring_v = ring_v.data(), a.out = out.data();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t c = 0; c < d; ++c) cuda::AftDecayChannel(a, b, c);
  }
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t row = slots[b], t = lengths[row];
    for (int64_t c = 0; c < d; ++c) {
      const double q = qkv[b * 3 * d + c], k = qkv[b * 3 * d + d + c],
                   v = qkv[b * 3 * d + 2 * d + c];
      const float* u = bias.data() + c / (d / heads) * s;
      const double lambda = -std::log(static_cast<double>(decay[c])), at = row * d + c;
      const double carried = std::isinf(ref0[at]) ? 0 : std::exp(ref0[at] - lambda);
      double y_num = std::exp(k + u[0]) * v + carried * num0[at];
      double y_den = std::exp(k + u[0]) + carried * den0[at];
      for (int64_t j = 0; j < s; ++j) {
        const int64_t delta = delta_of(t, j), slot = (row * s + j) * d + c;
        if (delta > t) continue;
        const double weight = std::exp(ring_k0[slot] + (delta < s ? u[delta] : 0.0));
        y_num += weight * ring_v0[slot];
        y_den += weight;
      }
      ExpectClose(out[b * d + c], y_num / y_den / (1 + std::exp(-q)), "y", b * d + c);
      // What the carried sums stand for after the step.
      double mass_num = carried * num0[at], mass_den = carried * den0[at];
      const int64_t leaving = (row * s + t % s) * d + c;
      if (t >= s) {
        mass_num += std::exp(static_cast<double>(ring_k0[leaving])) * ring_v0[leaving];
        mass_den += std::exp(static_cast<double>(ring_k0[leaving]));
      }
      const double scale = std::isinf(ref[at]) ? 0 : std::exp(static_cast<double>(ref[at]));
      ExpectClose(scale * num[at], mass_num, "exp(ref) num", at);
      ExpectClose(scale * den[at], mass_den, "exp(ref) den", at);
      EXPECT_EQ(ring_k[leaving], static_cast<float>(k));
      EXPECT_EQ(ring_v[leaving], static_cast<float>(v));
    }
  }
  for (int64_t i = 0; i < rows * d; ++i) {
    if (i / d == 1) {  // the row no slot names
      EXPECT_EQ(ref[i], ref0[i]);
      EXPECT_EQ(num[i], num0[i]);
    }
  }
  for (int64_t i = 0; i < rows * s * d; ++i) {
    const int64_t row = i / (s * d), j = i / d % s;
    if (row != 1 && j == lengths[row] % s) continue;  // written above
    ASSERT_EQ(ring_k[i], ring_k0[i]) << i;
    ASSERT_EQ(ring_v[i], ring_v0[i]) << i;
  }
}

// AFT's state for a row at length t, relative to its running max c: the
// keys that left the window in num and den, the last min(t, s) in the ring
// as exp(K - c) and exp(K - c) V, and 1e30 in the slots that hold no key
// (reading one overflows). A fresh row has c = -inf.
struct AftPool {
  std::vector<float> c, num, den, ek, ekv;
};

AftPool RandomAftPool(int64_t rows, int64_t s, int64_t d, const std::vector<int64_t>& lengths,
                      std::mt19937& gen) {
  AftPool p{Random(rows * d, -1, 1, gen), Random(rows * d, -1, 1, gen),
            Random(rows * d, 0.5f, 2, gen), Random(rows * s * d, 0.05f, 1, gen),
            Random(rows * s * d, -1, 1, gen)};
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t t = lengths[row];
    for (int64_t j = std::min(t, s); j < s; ++j) {
      for (int64_t c = 0; c < d; ++c) p.ek[(row * s + j) * d + c] = 1e30f;
    }
    for (int64_t c = 0; c < d && t <= s; ++c) p.num[row * d + c] = p.den[row * d + c] = 0;
    for (int64_t c = 0; c < d && t == 0; ++c) {
      p.c[row * d + c] = -std::numeric_limits<float>::infinity();
    }
  }
  return p;
}

double Mass(float c, float value) {  // exp(c) value, 0 for an empty row
  return std::isinf(c) ? 0 : std::exp(static_cast<double>(c)) * value;
}

// Each AFT form (a filter per head, a bias row per position as aft-full and
// aft-local have, no window as aft-simple) at five positions at once, on
// scattered pool rows, against the sums over the prefix in float64. What
// the state stands for is compared (exp(c) num, exp(c) ring), not how it
// is scaled.
TEST(CudaStepMath, AftThreadsFollowThePrefixSums) {
  const int64_t batch = 4, d = 6, rows = 5;
  const std::vector<int64_t> slots = {3, 0, 2, 4}, lengths = {2, 7, 4, 9, 0};
  struct Form {
    int64_t window, bias_heads, bias_rows;
  };
  // Window 8 with a table of 8 rows: the row at 9 is past the table, as a
  // CUDA graph's spare row runs past the context, and reads its last row.
  for (const Form form : {Form{4, 2, 1}, Form{12, 1, 12}, Form{8, 1, 8}, Form{0, 1, 1}}) {
    const int64_t s = form.window;
    SCOPED_TRACE("window " + std::to_string(s) + ", bias rows " + std::to_string(form.bias_rows));
    std::mt19937 gen(23);
    const auto qkv = Random(batch * 3 * d, -3, 3, gen);
    const auto bias =
        Random(form.bias_heads * form.bias_rows * std::max<int64_t>(s, 1), -1, 1, gen);
    const AftPool before = RandomAftPool(rows, s, d, lengths, gen);
    AftPool p = before;
    auto out = Unwritten(batch * d);
    cuda::AftStepArgs a;
    a.batch = batch, a.channels = d, a.window = s, a.bias_heads = form.bias_heads;
    a.bias_rows = form.bias_rows, a.stride = 3 * d, a.q = qkv.data(), a.k = a.q + d;
    a.v = a.q + 2 * d, a.bias = s > 0 ? bias.data() : nullptr, a.slots = slots.data();
    a.lengths = lengths.data(), a.c = p.c.data(), a.num = p.num.data(), a.den = p.den.data();
    a.ring_ek = p.ek.data(), a.ring_ekv = p.ekv.data(), a.out = out.data();
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t c = 0; c < d; ++c) cuda::AftChannel(a, b, c);
    }
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t row = slots[b], t = lengths[row];
      for (int64_t c = 0; c < d; ++c) {
        const int64_t at = row * d + c;
        const double q = qkv[b * 3 * d + c], k = qkv[b * 3 * d + d + c];
        const double v = qkv[b * 3 * d + 2 * d + c];
        const float* u =
            bias.data() + (c / (d / form.bias_heads) * form.bias_rows +
                           (form.bias_rows > 1 ? std::min(t, form.bias_rows - 1) : 0)) *
                              s;
        // w = u[delta] inside the window, 0 beyond it.
        auto w = [&](int64_t delta) { return delta < s ? static_cast<double>(u[delta]) : 0.0; };
        double y_num = std::exp(k + w(0)) * v + Mass(before.c[at], before.num[at]);
        double y_den = std::exp(k + w(0)) + Mass(before.c[at], before.den[at]);
        for (int64_t j = 0; j < std::min(t, s); ++j) {
          const int64_t delta = ((t - 1 - j) % s + s) % s + 1, e = (row * s + j) * d + c;
          y_num += std::exp(w(delta)) * Mass(before.c[at], before.ekv[e]);
          y_den += std::exp(w(delta)) * Mass(before.c[at], before.ek[e]);
        }
        ExpectClose(out[b * d + c], y_num / y_den / (1 + std::exp(-q)), "y", b * d + c);
        double carried_num = Mass(before.c[at], before.num[at]);
        double carried_den = Mass(before.c[at], before.den[at]);
        if (s == 0 || t >= s) {  // the key leaving the window joins the sums
          const int64_t e = (row * s + (s == 0 ? 0 : t % s)) * d + c;
          carried_num += s == 0 ? std::exp(k) * v : Mass(before.c[at], before.ekv[e]);
          carried_den += s == 0 ? std::exp(k) : Mass(before.c[at], before.ek[e]);
        }
        ExpectClose(Mass(p.c[at], p.num[at]), carried_num, "exp(c) num", at);
        ExpectClose(Mass(p.c[at], p.den[at]), carried_den, "exp(c) den", at);
        for (int64_t j = 0; j < std::min(t + 1, s); ++j) {
          const int64_t e = (row * s + j) * d + c;
          const bool new_key = j == t % s;
          ExpectClose(Mass(p.c[at], p.ek[e]),
                      new_key ? std::exp(k) : Mass(before.c[at], before.ek[e]), "exp(c) ring", e);
        }
      }
    }
    const int64_t untouched = 1;  // the row no slot names
    for (int64_t i = untouched * d; i < (untouched + 1) * d; ++i) ASSERT_EQ(p.c[i], before.c[i]);
    for (int64_t i = untouched * s * d; i < (untouched + 1) * s * d; ++i) {
      ASSERT_EQ(p.ek[i], before.ek[i]);
    }
  }
}

// Attention over a cache: four rows at lengths 5, 2, 0 and 9 (past the
// cache of 9 positions: the kernel writes its zeros, the cache stays),
// heads sharing key/value heads or not, with ALiBi's and Transformer-XL's
// terms, run as the kernels run it: the append, then four warps taking
// every fourth position of a block's span, merged, and the splits' partial
// runs merged where a (row, head) is split over blocks.
TEST(CudaStepMath, AttentionWarpsAndSplitsMergeToTheSoftmaxOverTheCache) {
  const int64_t batch = 4, heads = 4, n = 40, capacity = 9, rows = 5, warps = 4;
  const std::vector<int64_t> slots = {3, 0, 4, 2}, lengths = {2, 0, 0, 5, 9};
  struct Form {
    int64_t kv_heads;
    bool alibi, xl;
    int64_t splits;
  };
  // Three splits of the 6 positions of the row at 5 take 2 each; the row at
  // 0 leaves two splits empty.
  for (const Form form : {Form{2, true, false, 1}, Form{4, false, true, 1},
                          Form{1, false, false, 1}, Form{2, true, true, 3}}) {
    const int64_t kv = form.kv_heads, stride = (heads + 2 * kv) * n;
    SCOPED_TRACE("kv heads " + std::to_string(kv) + ", splits " + std::to_string(form.splits));
    std::mt19937 gen(31);
    const auto qkv = Random(batch * stride, -1, 1, gen);
    const auto log_slopes = Random(heads, -3, 0, gen), u = Random(heads * n, -1, 1, gen);
    const auto p = Random(heads * n, -1, 1, gen), r = Random(heads * capacity * n, -1, 1, gen);
    const auto k_before = Random(rows * kv * capacity * n, -2, 2, gen);
    const auto v_before = Random(k_before.size(), -2, 2, gen);
    auto k_cache = k_before, v_cache = v_before;
    auto out = Unwritten(batch * heads * n);
    cuda::AttentionStepArgs a;
    a.batch = batch, a.heads = heads, a.kv_heads = kv, a.head_dim = n, a.capacity = capacity;
    a.stride = stride, a.scale = 1.f / std::sqrt(static_cast<float>(n)), a.q = qkv.data();
    a.k = a.q + heads * n, a.v = a.k + kv * n, a.slots = slots.data(), a.lengths = lengths.data();
    a.log_slopes = form.alibi ? log_slopes.data() : nullptr;
    a.content_bias = form.xl ? u.data() : nullptr, a.position_bias = form.xl ? p.data() : nullptr;
    a.r = form.xl ? r.data() : nullptr;
    a.k_cache = k_cache.data(), a.v_cache = v_cache.data(), a.out = out.data();
    a.splits = form.splits;
    std::vector<float> partial(cuda::AttentionPartialFloats(a));
    a.partial = partial.data();
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t g = 0; g < kv; ++g) {
        for (int64_t e = 0; e < n; ++e) cuda::AttentionAppend(a, b, g, e);
      }
    }
    for (int64_t block = 0; block < batch * heads; ++block) {
      const int64_t t = cuda::AttentionLength(a, block);
      if (t < 0) {
        EXPECT_EQ(lengths[slots[block / heads]], capacity);
        continue;
      }
      for (int64_t split = 0; split < a.splits; ++split) {
        int64_t begin = 0, end = 0;
        cuda::AttentionSpan(a, t, split, &begin, &end);
        std::vector<float> maxes(warps), sums(warps), values(warps * n);
        for (int64_t w = 0; w < warps; ++w) {
          std::vector<cuda::SoftmaxRun> runs(kWarp);
          for (int64_t j = begin + w; j < end; j += warps) {
            float dot = 0.f;
            for (int lane = 0; lane < kWarp; ++lane) {
              dot += cuda::AttentionDotPart(a, block, t, j, lane);
            }
            const float score = cuda::AttentionScore(a, block, t, j, dot);
            for (int lane = 0; lane < kWarp; ++lane) {
              cuda::AttentionTake(a, block, j, lane, score, &runs[lane]);
            }
          }
          maxes[w] = runs[0].max, sums[w] = runs[0].sum;
          for (int64_t e = 0; e < n; ++e) values[w * n + e] = runs[e % kWarp].values[e / kWarp];
        }
        for (int64_t e = 0; e < n; ++e) {
          cuda::AttentionSplitResult(a, block, split, e, maxes.data(), sums.data(), values.data(),
                                     warps);
        }
      }
      for (int64_t e = 0; e < n && a.splits > 1; ++e) cuda::AttentionMergeSplits(a, block, e);
    }
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t slot = slots[b], t = lengths[slot];
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t g = h / (heads / kv), block = b * heads + h;
        if (t >= capacity) {
          for (int64_t e = 0; e < n; ++e) EXPECT_TRUE(std::isnan(out[block * n + e]));
          continue;
        }
        // Key and value j: the cache's, but the row's new ones at t.
        auto cached = [&](const std::vector<float>& cache, int64_t j, int64_t e, int64_t offset) {
          return j == t ? static_cast<double>(qkv[b * stride + offset + g * n + e])
                        : static_cast<double>(cache[((slot * kv + g) * capacity + j) * n + e]);
        };
        std::vector<double> score(t + 1);
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < n; ++e) {
            const double q = qkv[b * stride + h * n + e];
            dot += (q + (form.xl ? u[h * n + e] : 0.0)) * cached(k_before, j, e, heads * n);
            if (form.xl) dot += (q + p[h * n + e]) * r[(h * capacity + t - j) * n + e];
          }
          score[j] = dot / std::sqrt(static_cast<double>(n)) -
                     (form.alibi ? std::exp(static_cast<double>(log_slopes[h])) * (t - j) : 0.0);
        }
        const double top = *std::max_element(score.begin(), score.end());
        for (int64_t e = 0; e < n; ++e) {
          double num = 0, den = 0;
          for (int64_t j = 0; j <= t; ++j) {
            num += std::exp(score[j] - top) * cached(v_before, j, e, (heads + kv) * n);
            den += std::exp(score[j] - top);
          }
          ExpectClose(out[block * n + e], num / den, "y", block * n + e);
        }
      }
    }
    // The cache changed only at the live rows' lengths, to their keys and values.
    for (int64_t i = 0; i < static_cast<int64_t>(k_cache.size()); ++i) {
      const int64_t slot = i / (kv * capacity * n), j = i / n % capacity;
      const int64_t at = std::find(slots.begin(), slots.end(), slot) - slots.begin();
      if (at == batch || j != lengths[slot]) {
        ASSERT_EQ(k_cache[i], k_before[i]) << "key at " << i;
        ASSERT_EQ(v_cache[i], v_before[i]) << "value at " << i;
        continue;
      }
      const int64_t g = i / (capacity * n) % kv, e = i % n;
      ASSERT_EQ(k_cache[i], qkv[at * stride + heads * n + g * n + e]) << "key at " << i;
      ASSERT_EQ(v_cache[i], qkv[at * stride + (heads + kv) * n + g * n + e]) << "value at " << i;
    }
  }
}

// A (row, head) is split only where the batch leaves the GPU idle and the
// cache is long enough to share out.
TEST(CudaStepMath, AttentionSplitsFillTheGpuAtLongContexts) {
  EXPECT_EQ(cuda::AttentionSplits(32, 8192), 16);   // one row of 32 heads
  EXPECT_EQ(cuda::AttentionSplits(4, 8192), 32);    // at most 256 positions a span
  EXPECT_EQ(cuda::AttentionSplits(2048, 8192), 1);  // 64 rows fill it
  EXPECT_EQ(cuda::AttentionSplits(1, 300), 1);      // too short to share
  cuda::AttentionStepArgs a;
  a.batch = 2, a.heads = 3, a.head_dim = 10, a.splits = 4;
  EXPECT_EQ(cuda::AttentionPartialFloats(a), 2 * 3 * 4 * 12);
  a.splits = 1;
  EXPECT_EQ(cuda::AttentionPartialFloats(a), 0);
}

}  // namespace
}  // namespace attn
