#include "model/kernels/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace attn::kernels {
namespace {

TEST(KernelExp, WithinTwoUlpOverTheWholeRange) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.001953125f) {  // 2^-9 steps: ~90k points
    const double exact = std::exp(static_cast<double>(x));
    const double relative = std::abs(Exp(x) - exact) / exact;
    worst = std::max(worst, relative);
  }
  EXPECT_LT(worst, 2.5e-7) << "float32 ulp is 1.19e-7";
}

TEST(KernelExp, EdgesBehaveLikeExp) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Exp(0.0f), 1.0f);  // exactly: a running max that did not move rescales by 1
  EXPECT_EQ(Exp(-inf), 0.0f);  // the AFT running max starts at -inf
  EXPECT_EQ(Exp(-1000.0f), 0.0f);
  EXPECT_EQ(Exp(1000.0f), inf);
  EXPECT_TRUE(std::isnan(Exp(std::numeric_limits<float>::quiet_NaN())));
}

double GeluExact(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

TEST(KernelGelu, MatchesTheErfFormulaIncludingTheNegativeTail) {
  std::vector<float> xs;
  for (float x = -12.0f; x <= 12.0f; x += 0.0009765625f) xs.push_back(x);  // 2^-10: ~25k points
  std::vector<float> gelu = xs;
  GeluInPlace(static_cast<int64_t>(gelu.size()), gelu.data());
  double worst_absolute = 0, worst_tail_relative = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double exact = GeluExact(xs[i]);
    const double error = std::abs(gelu[i] - exact);
    worst_absolute = std::max(worst_absolute, error / std::max(1.0, std::abs(double{xs[i]})));
    // Where GELU is small, it stays within a fraction of a percent; 1 + erf
    // computed as a difference of two numbers near 1 would be off by up to
    // 100% there (float spacing near 1 is 6e-8).
    if (xs[i] < -1.0f && xs[i] > -6.0f) {
      worst_tail_relative = std::max(worst_tail_relative, error / std::abs(exact));
    }
  }
  EXPECT_LT(worst_absolute, 2.5e-7);
  EXPECT_LT(worst_tail_relative, 1e-2);
}

TEST(KernelGelu, EdgesAndEveryLengthAroundTheBlocks) {
  const float inf = std::numeric_limits<float>::infinity();
  float edges[] = {0.0f, inf, -100.0f, std::nanf("")};
  GeluInPlace(4, edges);
  EXPECT_EQ(edges[0], 0.0f);
  EXPECT_EQ(edges[1], inf);
  EXPECT_EQ(edges[2], 0.0f);
  EXPECT_TRUE(std::isnan(edges[3]));
  // Lengths that end inside, at and past a block of the parallel split.
  for (int64_t n : {1, 7, 1023, 1024, 1025, 40961}) {
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 97) * 0.1f - 4.8f;
    std::vector<float> y = x;
    GeluInPlace(n, y.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(y[i], GeluExact(x[i]), 2e-6) << "n " << n << " i " << i;
    }
  }
}

// SwiGLU's gating against silu(g) * u in double, over lengths that end
// inside, at and past a block of the parallel split, with the tails where
// exp(-g) overflows (g far below 0) or vanishes, and NaN carried through.
TEST(KernelSiluMul, MatchesItsFormulaOverEveryLengthAndTheTails) {
  for (int64_t n : {1, 7, 1023, 1024, 1025, 40961}) {
    std::vector<float> gate(n), up(n);
    for (int64_t i = 0; i < n; ++i) {
      gate[i] = static_cast<float>(i % 211) * 0.5f - 60.0f;  // -60 .. 45
      up[i] = std::cos(0.37f * static_cast<float>(i)) * 3.0f;
    }
    std::vector<float> y = gate;
    SiluMulInPlace(n, y.data(), up.data());
    for (int64_t i = 0; i < n; ++i) {
      const double g = gate[i];
      const double want = g / (1.0 + std::exp(-g)) * up[i];
      ASSERT_NEAR(y[i], want, 1e-6 + 5e-7 * std::abs(want)) << "n " << n << " i " << i;
    }
  }
  std::vector<float> gate = {-100.0f, 100.0f, 0.0f, std::nanf(""), 1.0f};
  const std::vector<float> up = {2.0f, 2.0f, 5.0f, 1.0f, std::nanf("")};
  SiluMulInPlace(5, gate.data(), up.data());
  EXPECT_EQ(gate[0], 0.0f);  // -100 * 2 / (1 + e^100): 0, not NaN from inf / inf
  EXPECT_EQ(gate[1], 200.0f);
  EXPECT_EQ(gate[2], 0.0f);
  EXPECT_TRUE(std::isnan(gate[3]));
  EXPECT_TRUE(std::isnan(gate[4]));
}

TEST(KernelLogSumExp, MatchesADoubleLoopOnAVocabularyRow) {
  // Logits spread as a trained head's are, with one far above the rest.
  std::vector<float> logits(4099);
  for (size_t i = 0; i < logits.size(); ++i) {
    logits[i] = 12.0f * std::sin(0.013f * static_cast<float>(i * i % 977)) - 3.0f;
  }
  logits[1234] = 41.0f;
  for (const int64_t n : {1, 7, 64, 4099}) {
    double max = -INFINITY, total = 0;
    for (int64_t i = 0; i < n; ++i) max = std::max(max, static_cast<double>(logits[i]));
    for (int64_t i = 0; i < n; ++i) total += std::exp(logits[i] - max);
    EXPECT_NEAR(LogSumExp(logits.data(), n), max + std::log(total), 2e-5) << n;
  }
}

TEST(KernelLogSumExp, EdgesOfTheInput) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> masked = {-inf, 0.0f, -inf, std::log(3.0f)};
  EXPECT_NEAR(LogSumExp(masked.data(), 4), std::log(4.0f), 1e-6);
  const std::vector<float> all_masked = {-inf, -inf};
  EXPECT_EQ(LogSumExp(all_masked.data(), 2), -inf);
  EXPECT_EQ(LogSumExp(nullptr, 0), -inf);
  const std::vector<float> huge = {1e30f, 0.0f};  // no overflow: shifted by the max
  EXPECT_FLOAT_EQ(LogSumExp(huge.data(), 2), 1e30f);
  const std::vector<float> nan = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_TRUE(std::isnan(LogSumExp(nan.data(), 2)));
}

TEST(KernelArgMax, FirstLargestAndEdges) {
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.1f * static_cast<float>(i));
  x[700] = x[333] = 5.0f;  // a tie: the first wins, as std::max_element's
  EXPECT_EQ(ArgMax(x.data(), 1000), 333);
  EXPECT_EQ(ArgMax(x.data(), 300), std::max_element(x.begin(), x.begin() + 300) - x.begin());
  x[10] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(ArgMax(x.data(), 1000), 333);
  EXPECT_EQ(ArgMax(x.data(), 0), 0);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> masked = {-inf, -inf, 2.0f, inf, 1.0f};
  EXPECT_EQ(ArgMax(masked.data(), 5), 3);
}

TEST(KernelNorms, RowsMatchTheirFormulas) {
  const int64_t rows = 3, d = 37;
  std::vector<float> x(rows * d), gain(d), rms(rows * d), scale(rows * d);
  for (int64_t i = 0; i < rows * d; ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
  for (int64_t i = 0; i < d; ++i) gain[i] = 0.5f + 0.03f * static_cast<float>(i);
  RmsNormRows(rows, d, x.data(), gain.data(), 1e-5f, rms.data());
  ScaleNormRows(rows, d, x.data(), 2.5f, 1e-5f, scale.data());
  for (int64_t r = 0; r < rows; ++r) {
    double squares = 0;
    for (int64_t i = 0; i < d; ++i) squares += static_cast<double>(x[r * d + i]) * x[r * d + i];
    for (int64_t i = 0; i < d; ++i) {
      const double v = x[r * d + i];
      EXPECT_NEAR(rms[r * d + i], gain[i] * v / std::sqrt(squares / d + 1e-5), 1e-5);
      EXPECT_NEAR(scale[r * d + i], 2.5 * v / std::sqrt(squares), 1e-5);
    }
  }
}

// Mamba-2's gated norm against its formula in double: two groups, z read
// from rows wider than y (a slice of the input projection).
TEST(KernelNorms, GatedRmsNormMatchesItsFormula) {
  const int64_t rows = 3, d = 40, groups = 2, width = d / groups, z_stride = 70;
  std::vector<float> y(rows * d), z(rows * z_stride), gain(d), out(rows * d);
  for (size_t i = 0; i < y.size(); ++i) y[i] = std::sin(0.41f * static_cast<float>(i)) * 2.0f;
  for (size_t i = 0; i < z.size(); ++i) z[i] = std::cos(0.23f * static_cast<float>(i)) * 4.0f;
  for (int64_t i = 0; i < d; ++i) gain[i] = 0.5f + 0.02f * static_cast<float>(i);
  GatedRmsNormRows(rows, d, groups, y.data(), z.data(), z_stride, gain.data(), 1e-5f, out.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      std::vector<double> gated(width);
      double squares = 0;
      for (int64_t i = 0; i < width; ++i) {
        const double zi = z[r * z_stride + g * width + i];
        gated[i] = y[r * d + g * width + i] * zi / (1.0 + std::exp(-zi));
        squares += gated[i] * gated[i];
      }
      for (int64_t i = 0; i < width; ++i) {
        const int64_t at = g * width + i;
        EXPECT_NEAR(out[r * d + at], gain[at] * gated[i] / std::sqrt(squares / width + 1e-5), 1e-5)
            << "row " << r << " channel " << at;
      }
    }
  }
}

// The causal convolution of `width` over `time` tokens against its formula
// in double, input rows `stride` floats apart.
void CheckCausalConv(int64_t batch, int64_t channels, int64_t width, int64_t time, int64_t stride) {
  const int64_t held = width - 1;
  std::vector<float> in(batch * time * stride), window(batch * held * channels);
  std::vector<float> weight(channels * width), bias(channels);
  std::vector<float> out(batch * time * channels), window_out(window.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = std::sin(0.7f * static_cast<float>(i));
  for (size_t i = 0; i < window.size(); ++i) window[i] = std::cos(0.3f * static_cast<float>(i));
  for (size_t i = 0; i < weight.size(); ++i) weight[i] = std::sin(1.3f * static_cast<float>(i));
  for (int64_t i = 0; i < channels; ++i) bias[i] = 0.05f * static_cast<float>(i) - 0.5f;
  CausalConvArgs a;
  a.batch = batch;
  a.time = time;
  a.channels = channels;
  a.width = width;
  a.in_stride = stride;
  a.in = in.data();
  a.window = window.data();
  a.weight = weight.data();
  a.bias = bias.data();
  a.out = out.data();
  a.window_out = window_out.data();
  CausalConvSilu(a);
  for (int64_t b = 0; b < batch; ++b) {
    // Input p of row b, p from -(L - 1).
    auto input = [&](int64_t p, int64_t i) -> double {
      return p < 0 ? window[(b * held + held + p) * channels + i] : in[(b * time + p) * stride + i];
    };
    for (int64_t t = 0; t < time; ++t) {
      for (int64_t i = 0; i < channels; ++i) {
        double sum = bias[i];
        for (int64_t j = 0; j < width; ++j) sum += weight[i * width + j] * input(t - held + j, i);
        EXPECT_NEAR(out[(b * time + t) * channels + i], sum / (1.0 + std::exp(-sum)), 1e-5)
            << "width " << width << " time " << time << " row " << b << " channel " << i;
      }
    }
    for (int64_t j = 0; j < held; ++j) {
      for (int64_t i = 0; i < channels; ++i) {
        EXPECT_EQ(window_out[(b * held + j) * channels + i], input(time - held + j, i));
      }
    }
  }
}

// The causal convolution against its formula in double, for chunks shorter
// than the window (inputs from both the window and the chunk) and longer,
// over strided input rows; the window then holds the last L - 1 inputs.
TEST(KernelCausalConv, MatchesItsFormulaAndAdvancesTheWindow) {
  const int64_t batch = 2, channels = 21, stride = 25;
  // Widths 3 and 4 have loops of their own; 2 and 5 take the general one.
  for (int64_t width : {2, 3, 4, 5}) {
    for (int64_t time : {1, 2, 6}) {
      CheckCausalConv(batch, channels, width, time, stride);
    }
  }
}

// A key/value cache of random heads, the slopes of ALiBi-like biases and a
// float64 loop of the attention both kernels compute (kernels.h).
struct AttentionCase {
  int64_t rows = 2, heads = 4, kv_heads = 2, head_dim = 64, capacity = 0;
  std::vector<int64_t> slots;
  std::vector<float> k, v, q, log_slopes;

  AttentionCase(int64_t dh, int64_t capacity_, int64_t queries)
      : head_dim(dh), capacity(capacity_) {
    std::mt19937 rng(static_cast<unsigned>(dh * 131 + capacity_));
    std::normal_distribution<float> normal;
    auto fill = [&](std::vector<float>& x, size_t n) {
      x.resize(n);
      for (float& value : x) value = normal(rng);
    };
    fill(k, rows * kv_heads * capacity * dh);
    fill(v, rows * kv_heads * capacity * dh);
    fill(q, rows * queries * heads * dh);
    for (int64_t h = 0; h < heads; ++h) log_slopes.push_back(-0.5f * static_cast<float>(h + 1));
    slots = {1, 0};  // row b reads cache row slots[b]
  }

  // y of query q_row (heads * head_dim floats) of head h at position P of row b.
  std::vector<double> Attend(const float* q_row, int64_t b, int64_t h, int64_t position,
                             double scale) const {
    const int64_t kv = h / (heads / kv_heads), dh = head_dim;
    const int64_t base = (slots[b] * kv_heads + kv) * capacity * dh;
    std::vector<double> score(position + 1), y(dh, 0.0);
    double largest = -std::numeric_limits<double>::infinity(), total = 0.0;
    for (int64_t j = 0; j <= position; ++j) {
      double dot = 0.0;
      for (int64_t d = 0; d < dh; ++d) dot += double{q_row[h * dh + d]} * k[base + j * dh + d];
      score[j] = scale * dot - std::exp(double{log_slopes[h]}) * static_cast<double>(position - j);
      largest = std::max(largest, score[j]);
    }
    for (int64_t j = 0; j <= position; ++j) {
      const double weight = std::exp(score[j] - largest);
      total += weight;
      for (int64_t d = 0; d < dh; ++d) y[d] += weight * v[base + j * dh + d];
    }
    for (double& value : y) value /= total;
    return y;
  }

  void Fill(CacheHeadsArgs& a, float* out) const {
    a.batch = rows;
    a.heads = heads;
    a.head_dim = head_dim;
    a.capacity = capacity;
    a.kv_heads = kv_heads;
    a.slots = slots.data();
    a.log_slopes = log_slopes.data();
    a.k_cache = k.data();
    a.v_cache = v.data();
    a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    a.out = out;
  }

  // The arguments of a one-token step over this cache, rows at `lengths`.
  CachedAttentionArgs StepArgs(const std::vector<int64_t>& lengths, float* out) const {
    CachedAttentionArgs a;
    Fill(a, out);
    a.lengths = lengths.data();
    a.q = q.data();
    a.q_stride = heads * head_dim;
    return a;
  }
};

void ExpectNear(const float* got, const std::vector<double>& want, const std::string& where) {
  for (size_t d = 0; d < want.size(); ++d) {
    ASSERT_NEAR(got[d], want[d], 1e-5 + 1e-4 * std::abs(want[d])) << where << ", lane " << d;
  }
}

// The causal prefill against the float64 loop with both register tilings
// (each CPU runs one of them; both run here), at the head sizes with
// compiled-in loops (32, 40, 64) and one without (24), over a chunk that
// starts after cached tokens, spans several key groups and outputs only its
// last tokens.
TEST(KernelAttention, PrefillMatchesADoubleLoopWithBothTilings) {
  const int64_t start = 37, time = 150, first_output = 9;
  for (int64_t dh : {24, 32, 40, 64}) {
    const AttentionCase c(dh, start + time, time);
    for (AttentionTiles tiles : {AttentionTiles::kWide, AttentionTiles::kNarrow}) {
      std::vector<float> out(c.rows * (time - first_output) * c.heads * dh);
      CausalPrefillArgs a;
      c.Fill(a, out.data());
      a.time = time;
      a.start = start;
      a.q = c.q.data();
      a.token_stride = c.heads * dh;
      a.row_stride = time * a.token_stride;
      a.first_output = first_output;
      CausalAttentionPrefill(a, tiles);
      for (int64_t b = 0; b < c.rows; ++b) {
        for (int64_t t = first_output; t < time; ++t) {
          for (int64_t h = 0; h < c.heads; ++h) {
            const std::vector<double> want =
                c.Attend(a.q + b * a.row_stride + t * a.token_stride, b, h, start + t, a.scale);
            const int64_t at = ((b * (time - first_output) + t - first_output) * c.heads + h) * dh;
            ExpectNear(out.data() + at, want,
                       "dh " + std::to_string(dh) +
                           (tiles == AttentionTiles::kWide ? " wide" : " narrow") + ", row " +
                           std::to_string(b) + ", token " + std::to_string(t) + ", head " +
                           std::to_string(h));
          }
        }
      }
    }
  }
}

// The one-token step likewise, with rows of different lengths.
TEST(KernelAttention, StepMatchesADoubleLoopWithBothTilings) {
  for (int64_t dh : {24, 32, 40, 64}) {
    const AttentionCase c(dh, 300, 1);
    const std::vector<int64_t> lengths = {5, 233};  // by cache row: slots[0] = 1 reads 233
    for (AttentionTiles tiles : {AttentionTiles::kWide, AttentionTiles::kNarrow}) {
      std::vector<float> out(c.rows * c.heads * dh);
      const CachedAttentionArgs a = c.StepArgs(lengths, out.data());
      CachedAttentionStep(a, tiles);
      for (int64_t b = 0; b < c.rows; ++b) {
        for (int64_t h = 0; h < c.heads; ++h) {
          const std::vector<double> want =
              c.Attend(a.q + b * a.q_stride, b, h, lengths[c.slots[b]], a.scale);
          ExpectNear(out.data() + (b * c.heads + h) * dh, want,
                     "dh " + std::to_string(dh) +
                         (tiles == AttentionTiles::kWide ? " wide" : " narrow") + ", row " +
                         std::to_string(b) + ", head " + std::to_string(h));
        }
      }
    }
  }
}

// The step that writes each row's new key and value itself (`append`): the
// cache after it is the one AppendToCache leaves, and its outputs equal the
// float64 loop over that cache, with both tilings and grouped key/value
// heads (two query heads read each).
TEST(KernelAttention, StepAppendsTheNewKeysAndValuesItAttends) {
  for (int64_t dh : {24, 64}) {
    const AttentionCase c(dh, 300, 1);
    const std::vector<int64_t> lengths = {5, 233};  // by cache row: slots[0] = 1 appends at 233
    const int64_t width = c.kv_heads * dh;
    std::vector<float> fresh(c.rows * 2 * width);  // row b: its keys, then its values
    std::mt19937 rng(static_cast<unsigned>(dh));
    std::normal_distribution<float> normal;
    for (float& x : fresh) x = normal(rng);
    AttentionCase appended = c;
    AppendToCache(c.rows, c.kv_heads, dh, c.capacity, c.slots.data(), lengths.data(), fresh.data(),
                  fresh.data() + width, 2 * width, appended.k.data(), appended.v.data());
    // Row 0's key head 1, lane 3 lands in cache row 1 at its length.
    ASSERT_EQ(appended.k[((1 * c.kv_heads + 1) * c.capacity + 233) * dh + 3], fresh[dh + 3]);
    for (AttentionTiles tiles : {AttentionTiles::kWide, AttentionTiles::kNarrow}) {
      AttentionCase run = c;
      std::vector<float> out(c.rows * c.heads * dh);
      CachedAttentionArgs a = run.StepArgs(lengths, out.data());
      a.append = {fresh.data(), fresh.data() + width, 2 * width};
      CachedAttentionStep(a, tiles);
      EXPECT_EQ(run.k, appended.k);
      EXPECT_EQ(run.v, appended.v);
      for (int64_t b = 0; b < c.rows; ++b) {
        for (int64_t h = 0; h < c.heads; ++h) {
          ExpectNear(out.data() + (b * c.heads + h) * dh,
                     appended.Attend(a.q + b * a.q_stride, b, h, lengths[c.slots[b]], a.scale),
                     "dh " + std::to_string(dh) + ", row " + std::to_string(b) + ", head " +
                         std::to_string(h));
        }
      }
    }
  }
}

// Linear attention's recurrence in float64 for one head of one row, token by
// token from the state (s, z) it is given and left with:
//   S = g S + phi(k) v^T,  z = g z + phi(k),  y = phi(q)^T S / (phi(q) . z + eps).
// Token t's q, k and v are `dh` floats at q + t * token_stride, q + width and
// q + 2 * width; returns each token's y.
std::vector<std::vector<double>> LinearRecurrence(const float* q, int64_t time,
                                                  int64_t token_stride, int64_t width, int64_t dh,
                                                  bool exp_feature, double g, double eps,
                                                  std::vector<double>& s, std::vector<double>& z) {
  auto phi = [&](const float* x) {
    const double max = *std::max_element(x, x + dh);
    std::vector<double> f(dh);
    for (int64_t i = 0; i < dh; ++i)
      f[i] = exp_feature ? std::exp(x[i] - max) : (x[i] > 0 ? x[i] + 1.0 : std::exp(x[i]));
    return f;
  };
  std::vector<std::vector<double>> ys;
  for (int64_t t = 0; t < time; ++t) {
    const float* qt = q + t * token_stride;
    const float* v = qt + 2 * width;
    const std::vector<double> pq = phi(qt), pk = phi(qt + width);
    std::vector<double> y(dh, 0.0);
    double den = eps;
    for (int64_t i = 0; i < dh; ++i) {
      for (int64_t j = 0; j < dh; ++j) {
        s[i * dh + j] = g * s[i * dh + j] + pk[i] * v[j];
        y[j] += pq[i] * s[i * dh + j];
      }
      z[i] = g * z[i] + pk[i];
      den += pq[i] * z[i];
    }
    for (double& value : y) value /= den;
    ys.push_back(std::move(y));
  }
  return ys;
}

// The blockwise prefill against that recurrence from a random state, with
// both register tilings, both feature maps, with and without a decay, over
// several blocks and a last one cut short, outputting only the tokens from
// first_output on; the state the prefill leaves is checked too.
TEST(KernelLinearAttention, PrefillMatchesTheRecurrenceWithBothTilings) {
  constexpr int64_t kRows = 2, kHeads = 3, kTime = 150, kFirstOutput = 7;
  const std::vector<float> decays = {0.5f, 0.97f, 1.0f};
  const std::vector<int64_t> slots = {1, 0};
  for (int64_t dh : {24, 40, 64}) {
    std::mt19937 rng(static_cast<unsigned>(dh));
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    const int64_t width = kHeads * dh, token_stride = 3 * width, row_stride = kTime * token_stride;
    std::vector<float> qkv(kRows * row_stride), s0(kRows * kHeads * dh * dh), z0(kRows * width);
    for (float& x : qkv) x = normal(rng);
    for (float& x : s0) x = uniform(rng);  // a state is a sum of positive features times values
    for (float& x : z0) x = 1.0f + uniform(rng);
    for (int variant = 0; variant < 8; ++variant) {
      const bool exp_feature = variant & 1, decay = variant & 2;
      const AttentionTiles tiles = variant & 4 ? AttentionTiles::kNarrow : AttentionTiles::kWide;
      std::vector<float> s = s0, z = z0, out(kRows * (kTime - kFirstOutput) * width);
      LinearPrefillArgs a;
      a.batch = kRows;
      a.heads = kHeads;
      a.head_dim = dh;
      a.exp_feature = exp_feature;
      a.slots = slots.data();
      a.q = qkv.data();
      a.k = a.q + width;
      a.v = a.k + width;
      a.decay = decay ? decays.data() : nullptr;
      a.s = s.data();
      a.z = z.data();
      a.time = kTime;
      a.block = 64;
      a.row_stride = row_stride;
      a.token_stride = token_stride;
      a.first_output = kFirstOutput;
      a.out = out.data();
      LinearAttentionPrefill(a, tiles);
      for (int64_t b = 0; b < kRows; ++b) {
        for (int64_t h = 0; h < kHeads; ++h) {
          const std::string where = "dh " + std::to_string(dh) + (exp_feature ? " exp" : " elu") +
                                    (decay ? " decay" : "") + (variant & 4 ? " narrow" : " wide") +
                                    ", row " + std::to_string(b) + ", head " + std::to_string(h);
          const int64_t state = slots[b] * kHeads + h;
          std::vector<double> rs(s0.begin() + state * dh * dh, s0.begin() + (state + 1) * dh * dh);
          std::vector<double> rz(z0.begin() + state * dh, z0.begin() + (state + 1) * dh);
          const auto ys =
              LinearRecurrence(a.q + b * row_stride + h * dh, kTime, token_stride, width, dh,
                               exp_feature, decay ? decays[h] : 1.0, a.eps, rs, rz);
          for (int64_t t = kFirstOutput; t < kTime; ++t) {
            const int64_t at = (b * (kTime - kFirstOutput) + t - kFirstOutput) * kHeads + h;
            ExpectNear(out.data() + at * dh, ys[t], where + ", token " + std::to_string(t));
          }
          for (int64_t i = 0; i < dh * dh; ++i)
            ASSERT_NEAR(s[state * dh * dh + i], rs[i], 1e-4 * (1.0 + std::abs(rs[i]))) << where;
          for (int64_t i = 0; i < dh; ++i)
            ASSERT_NEAR(z[state * dh + i], rz[i], 1e-4 * (1.0 + std::abs(rz[i]))) << where;
        }
      }
    }
  }
}

// Mamba-2's update in float64 for one head of one row, token by token from
// the state s [P, N] it is given and left with:
//   S = e^{dt A} S + dt x B^T,  y = S C + D x,  dt = softplus(raw + bias).
// Run returns each token's y and, in `sizes`, each lane's sum of the
// absolute values of its terms: float sums err in proportion to that.
struct Mamba2Reference {
  int64_t p, n, x_stride, dt_stride;
  double rate, skip, bias;
  std::vector<std::vector<double>> Run(const float* x, const float* b, const float* c,
                                       const float* dt, int64_t time, std::vector<double>& s,
                                       std::vector<std::vector<double>>& sizes) const {
    std::vector<std::vector<double>> ys;
    for (int64_t t = 0; t < time; ++t) {
      const double raw = dt[t * dt_stride] + bias;
      const double step = raw > 20.0 ? raw : std::log1p(std::exp(raw));
      const double decay = std::exp(step * rate);
      std::vector<double> y(p), size(p);
      for (int64_t i = 0; i < p; ++i) {
        const double xi = x[t * x_stride + i];
        double sum = 0.0, terms = std::abs(skip * xi);
        for (int64_t j = 0; j < n; ++j) {
          double& state = s[i * n + j];
          state = decay * state + step * xi * b[t * x_stride + j];
          sum += state * c[t * x_stride + j];
          terms += std::abs(state * c[t * x_stride + j]);
        }
        y[i] = sum + skip * xi;
        size[i] = terms;
      }
      ys.push_back(std::move(y));
      sizes.push_back(std::move(size));
    }
    return ys;
  }
};

// The scan token by token, in blocks of several lengths (the last one cut
// short) and as chosen by length, with both register tilings, against that
// recurrence from a random state: two groups of heads, x, B and C read in
// place from one buffer as the mixer lays them out, steps from small to
// large (the biases), outputs only from first_output on, and the state left.
TEST(KernelMamba2Scan, EveryFormMatchesTheRecurrenceWithBothTilings) {
  constexpr int64_t kRows = 2, kHeads = 4, kGroups = 2, kTime = 150, kFirstOutput = 7;
  const std::vector<int64_t> slots = {1, 0};
  const std::vector<float> a_log = {-1.0f, 0.0f, 0.5f, 1.5f}, skip = {0.5f, -1.0f, 0.0f, 2.0f};
  const std::vector<float> dt_bias = {-4.0f, -1.0f, 0.5f, 3.0f};
  for (const auto& [p, n] :
       std::vector<std::pair<int64_t, int64_t>>{{24, 40}, {32, 16}, {64, 128}}) {
    std::mt19937 rng(static_cast<unsigned>(p * n));
    std::normal_distribution<float> normal;
    const int64_t xbc = kHeads * p + 2 * kGroups * n, dt_stride = kHeads + 3;
    std::vector<float> xbc_in(kRows * kTime * xbc), dt(kRows * kTime * dt_stride);
    std::vector<float> s0(kRows * kHeads * p * n);
    for (float& v : xbc_in) v = normal(rng);
    for (float& v : dt) v = normal(rng);
    for (float& v : s0) v = normal(rng);
    for (int64_t block : {0, 64, 7, -1}) {
      for (AttentionTiles tiles : {AttentionTiles::kWide, AttentionTiles::kNarrow}) {
        std::vector<float> s = s0, out(kRows * (kTime - kFirstOutput) * kHeads * p);
        Mamba2ScanArgs a;
        a.batch = kRows;
        a.time = kTime;
        a.heads = kHeads;
        a.head_dim = p;
        a.state_size = n;
        a.groups = kGroups;
        a.first_output = kFirstOutput;
        a.xbc_stride = xbc;
        a.dt_stride = dt_stride;
        a.slots = slots.data();
        a.x = xbc_in.data();
        a.b = a.x + kHeads * p;
        a.c = a.b + kGroups * n;
        a.dt = dt.data();
        a.dt_bias = dt_bias.data();
        a.a_log = a_log.data();
        a.d = skip.data();
        a.s = s.data();
        a.out = out.data();
        a.block = block;
        Mamba2Scan(a, tiles);
        for (int64_t row = 0; row < kRows; ++row) {
          for (int64_t h = 0; h < kHeads; ++h) {
            const std::string where =
                "p " + std::to_string(p) + " n " + std::to_string(n) + " block " +
                std::to_string(block) + (tiles == AttentionTiles::kNarrow ? " narrow" : " wide") +
                ", row " + std::to_string(row) + ", head " + std::to_string(h);
            const int64_t state = (slots[row] * kHeads + h) * p * n, g = h / (kHeads / kGroups);
            std::vector<double> rs(s0.begin() + state, s0.begin() + state + p * n);
            const Mamba2Reference ref{
                p, n, xbc, dt_stride, -std::exp(double{a_log[h]}), skip[h], dt_bias[h]};
            const int64_t first = row * kTime;
            std::vector<std::vector<double>> sizes;
            const auto ys =
                ref.Run(a.x + first * xbc + h * p, a.b + first * xbc + g * n,
                        a.c + first * xbc + g * n, a.dt + first * dt_stride + h, kTime, rs, sizes);
            for (int64_t t = kFirstOutput; t < kTime; ++t) {
              const int64_t at = (row * (kTime - kFirstOutput) + t - kFirstOutput) * kHeads + h;
              for (int64_t i = 0; i < p; ++i) {
                // A lane can be a small difference of large terms (large steps,
                // D up to 2): the tolerance grows with them, 16 float epsilons.
                ASSERT_NEAR(out[at * p + i], ys[t][i],
                            1e-5 + 1e-4 * std::abs(ys[t][i]) + 1e-6 * sizes[t][i])
                    << where << ", token " << t << ", lane " << i;
              }
            }
            for (int64_t i = 0; i < p * n; ++i)
              ASSERT_NEAR(s[state + i], rs[i], 1e-4 * (1.0 + std::abs(rs[i]))) << where;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace attn::kernels
