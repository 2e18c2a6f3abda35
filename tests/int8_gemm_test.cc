#include "model/kernels/int8_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <random>
#include <vector>

namespace attn::kernels {
namespace {

std::vector<float> Random(int64_t n, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

TEST(QuantizeRows, EveryWeightIsWithinHalfAStepAndTheLargestIsExact) {
  std::mt19937 rng(5);
  const int64_t out = 9, in = 37, ldw = in + 3;
  std::vector<float> w = Random(out * ldw, rng, 0.05f);
  for (int64_t k = 0; k < in; ++k) w[4 * ldw + k] = 0.0f;  // an all-zero row
  std::vector<int8_t> q(out * in);
  std::vector<float> scale(out);
  QuantizeRows(w.data(), out, in, ldw, q.data(), scale.data());
  for (int64_t o = 0; o < out; ++o) {
    float largest = 0.0f;
    int widest = 0;
    for (int64_t k = 0; k < in; ++k) {
      const float weight = w[o * ldw + k];
      largest = std::max(largest, std::abs(weight));
      widest = std::max(widest, std::abs(static_cast<int>(q[o * in + k])));
      EXPECT_LE(std::abs(weight - scale[o] * q[o * in + k]), 0.5f * scale[o] * (1 + 1e-6f))
          << o << "," << k;
    }
    if (o == 4) {
      EXPECT_EQ(scale[o], 1.0f);
      EXPECT_EQ(widest, 0);
    } else {
      EXPECT_FLOAT_EQ(scale[o], largest / 127.0f);
      EXPECT_EQ(widest, 127);
    }
  }
}

TEST(QuantizeRows, WeightsOnTheGridComeBackExactly) {
  const float step = 0.125f;
  std::vector<float> w;
  for (int level = -127; level <= 127; ++level) w.push_back(step * level);
  std::vector<int8_t> q(w.size());
  float scale = 0;
  QuantizeRows(w.data(), 1, w.size(), w.size(), q.data(), &scale);
  EXPECT_EQ(scale, step);
  for (size_t k = 0; k < w.size(); ++k) EXPECT_EQ(q[k], static_cast<int>(k) - 127);
}

// The paths this CPU runs, baseline first.
std::vector<Int8Path> Paths() {
  std::vector<Int8Path> paths;
  for (Int8Path path : {Int8Path::kBaseline, Int8Path::kAvx2, Int8Path::kAvx512Vnni}) {
    if (CpuRuns(path)) paths.push_back(path);
  }
  return paths;
}

struct Case {
  int rows, out, in;
  bool with_bias;
};

// Against the float64 product of the quantised operands (int8_gemm.h), with
// padded row strides on x and y so that a kernel reading or writing past a
// row's end would show. The integer sums are exact, so the bound is the
// rounding of the last line only; and every path must give the baseline's
// floats bit for bit. Also within the activations' rounding of the float
// product of the dequantised weights: |y - x W^T - b| <= t / 2 sum |W|.
void ExpectEveryPathComputesTheQuantisedProduct(const Case& c) {
  SCOPED_TRACE(testing::Message() << c.rows << " rows, out " << c.out << ", in " << c.in
                                  << (c.with_bias ? ", bias" : ""));
  std::mt19937 rng(c.rows * 7919 + c.out * 31 + c.in);
  const int64_t ldx = c.in + 3, ldy = c.out + 5;
  const std::vector<float> x = Random(c.rows * ldx, rng), w = Random(c.out * c.in, rng, 0.05f);
  const std::vector<float> bias = Random(c.out, rng);
  std::vector<int8_t> q(c.out * c.in), a(c.rows * c.in);
  std::vector<float> scale(c.out), t(c.rows);
  QuantizeRows(w.data(), c.out, c.in, c.in, q.data(), scale.data());
  QuantizeActivations(x.data(), c.rows, ldx, c.in, a.data(), t.data());
  const Int8Panels panels = PackInt8Panels(q.data(), c.out, c.in);
  const float sentinel = -12345.0f;
  std::vector<float> first;
  for (Int8Path path : Paths()) {
    SCOPED_TRACE(Int8PathName(path));
    std::vector<float> y(c.rows * ldy, sentinel);
    Int8GemmOn(path, x.data(), c.rows, ldx, panels, scale.data(), c.out, c.in,
               c.with_bias ? bias.data() : nullptr, y.data(), ldy);
    if (first.empty()) first = y;
    ASSERT_EQ(y, first) << "differs from the baseline loops";
  }
  for (int r = 0; r < c.rows; ++r) {
    for (int o = 0; o < c.out; ++o) {
      const double b = c.with_bias ? bias[o] : 0.0;
      int64_t sum = 0;
      double exact = b, weights = 0;
      for (int k = 0; k < c.in; ++k) {
        sum += static_cast<int64_t>(a[r * c.in + k]) * q[o * c.in + k];
        const double wk = static_cast<double>(scale[o]) * q[o * c.in + k];
        exact += wk * x[r * ldx + k];
        weights += std::abs(wk);
      }
      const double product = static_cast<double>(t[r]) * scale[o] * sum;
      const double got = first[r * ldy + o];
      ASSERT_NEAR(got, product + b, 4e-7 * (std::abs(product) + std::abs(b)) + 1e-30)
          << "row " << r << " out " << o;
      ASSERT_LE(std::abs(got - exact), 0.5 * t[r] * weights * (1 + 1e-5) + 1e-6)
          << "row " << r << " out " << o;
    }
    for (int64_t pad = c.out; pad < ldy; ++pad) ASSERT_EQ(first[r * ldy + pad], sentinel);
  }
}

// Rows cover every tile (4 to 1 rows) and their mixes; outputs a partial
// panel, whole panels, groups of four panels and the groups of one to three
// left at a range's end; inputs the groups of four and their remainders.
TEST(Int8Gemm, EveryPathComputesTheQuantisedProductForEveryTile) {
  std::cout << "int8 paths on this CPU:";
  for (Int8Path path : Paths()) std::cout << " " << Int8PathName(path);
  std::cout << "\n";
  for (int rows : {1, 2, 3, 4, 5, 7, 9}) {
    for (int out : {1, 4, 16, 21, 48, 64, 93}) {
      for (int in : {1, 3, 4, 7, 37, 256}) {
        for (bool with_bias : {false, true}) {
          ExpectEveryPathComputesTheQuantisedProduct({rows, out, in, with_bias});
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// Large enough to run on several threads: the bundled models' widest
// projection, at decode batches and a prefill chunk.
TEST(Int8Gemm, EveryPathComputesTheQuantisedProductOnSeveralThreads) {
  ExpectEveryPathComputesTheQuantisedProduct({1, 1024, 256, true});
  ExpectEveryPathComputesTheQuantisedProduct({4, 1024, 256, false});
  ExpectEveryPathComputesTheQuantisedProduct({64, 256, 1024, true});
  ExpectEveryPathComputesTheQuantisedProduct({127, 200, 160, true});
  ExpectEveryPathComputesTheQuantisedProduct({300, 96, 2048, false});
}

// The largest activation of each row is exact, every other within half a
// step; a zero row gives the bias, a row with an infinity or NaN gives NaN.
TEST(Int8Gemm, ActivationsRoundPerRowAndNonFiniteRowsGiveNaN) {
  const int64_t in = 6;
  std::vector<float> x = {0.5f, -2.0f, 0.3f,     1.01f, 0.0f, -0.77f,  // row 0
                          0,    0,     0,        0,     0,    0,       // row 1
                          1.0f, NAN,   2.0f,     0,     0,    0,       // row 2
                          1.0f, 2.0f,  INFINITY, 0,     0,    0};
  std::vector<int8_t> a(4 * in);
  std::vector<float> t(4);
  QuantizeActivations(x.data(), 4, in, in, a.data(), t.data());
  EXPECT_FLOAT_EQ(t[0], 2.0f / 127);
  EXPECT_EQ(a[1], -127);
  for (int k = 0; k < in; ++k) EXPECT_LE(std::abs(x[k] - t[0] * a[k]), 0.5f * t[0] * 1.0001f);
  EXPECT_EQ(t[1], 0.0f);
  EXPECT_TRUE(std::isnan(t[2]) && std::isnan(t[3]));
  std::vector<int8_t> q(2 * in, 3);
  const Int8Panels panels = PackInt8Panels(q.data(), 2, in);
  const std::vector<float> scale = {0.5f, 0.25f}, bias = {1.5f, -2.0f};
  for (Int8Path path : Paths()) {
    std::vector<float> y(8, 0.0f);
    Int8GemmOn(path, x.data(), 4, in, panels, scale.data(), 2, in, bias.data(), y.data(), 2);
    EXPECT_EQ(y[2], 1.5f) << Int8PathName(path);
    EXPECT_EQ(y[3], -2.0f) << Int8PathName(path);
    for (int i = 4; i < 8; ++i) EXPECT_TRUE(std::isnan(y[i])) << Int8PathName(path) << " " << i;
  }
}

// The vectorised rounding is nearbyint's: ties to even on a row whose scale
// is 1 (largest 127), and equal to std::nearbyint(x * 127 / max) on long
// random rows (the vector body and its tail).
TEST(Int8Gemm, ActivationsRoundToNearestWithTiesToEven) {
  const std::vector<float> ties = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f, -3.49f};
  const std::vector<int> expected = {127, 0, 2, 2, 0, -2, -2, 126, -3};
  std::vector<int8_t> a(ties.size());
  float t = 0;
  QuantizeActivations(ties.data(), 1, ties.size(), ties.size(), a.data(), &t);
  EXPECT_EQ(t, 1.0f);
  for (size_t k = 0; k < ties.size(); ++k) EXPECT_EQ(a[k], expected[k]) << ties[k];

  std::mt19937 rng(17);
  for (int64_t in : {1, 15, 16, 17, 1000, 4099}) {
    const std::vector<float> x = Random(3 * in, rng, 3.0f);
    std::vector<int8_t> q(3 * in);
    std::vector<float> scales(3);
    QuantizeActivations(x.data(), 3, in, in, q.data(), scales.data());
    for (int64_t r = 0; r < 3; ++r) {
      float largest = 0;
      for (int64_t k = 0; k < in; ++k) largest = std::max(largest, std::abs(x[r * in + k]));
      const float inverse = 127.0f / largest;
      for (int64_t k = 0; k < in; ++k) {
        ASSERT_EQ(q[r * in + k], static_cast<int8_t>(std::nearbyint(x[r * in + k] * inverse)))
            << "in " << in << ", row " << r << ", k " << k;
      }
    }
  }
}

// Rows too small for a finite inverse scale (largest |x| below about
// 3.7e-37, subnormals included) quantise to zeros: the product is the bias,
// never NaN. Tiny weights do the same.
TEST(Int8Gemm, TinyRowsGiveTheBiasNotNaN) {
  const int64_t in = 8, out = 3;
  std::vector<float> x = {1e-38f, -2e-38f, 1e-40f, 0,  0, 0,  0, 3e-39f,  // row 0: tiny
                          1,      -2,      3,      -4, 5, -6, 7, -8};     // row 1: plain
  std::vector<int8_t> a(2 * in);
  std::vector<float> t(2);
  QuantizeActivations(x.data(), 2, in, in, a.data(), t.data());
  for (int64_t k = 0; k < in; ++k) EXPECT_EQ(a[k], 0) << k;
  EXPECT_TRUE(std::isfinite(t[0]));

  std::vector<float> w(out * in, 0.5f);
  w[0] = 1e-44f;  // row 0 of the weights: subnormal, its scale underflows
  for (int64_t k = 1; k < in; ++k) w[k] = 0.0f;
  std::vector<int8_t> q(out * in);
  std::vector<float> scale(out);
  QuantizeRows(w.data(), out, in, in, q.data(), scale.data());
  EXPECT_GT(scale[0], 0.0f);
  for (int64_t k = 0; k < in; ++k) EXPECT_EQ(q[k], 0) << k;

  const Int8Panels panels = PackInt8Panels(q.data(), out, in);
  const std::vector<float> bias = {0.25f, -1.0f, 2.0f};
  for (Int8Path path : {Int8Path::kBaseline, Int8Path::kAvx2, Int8Path::kAvx512Vnni}) {
    if (!CpuRuns(path)) continue;
    std::vector<float> y(2 * out, -7.0f);
    Int8GemmOn(path, x.data(), 2, in, panels, scale.data(), out, in, bias.data(), y.data(), out);
    for (int64_t o = 0; o < out; ++o) EXPECT_EQ(y[o], bias[o]) << Int8PathName(path) << " " << o;
    EXPECT_EQ(y[out], bias[0]) << Int8PathName(path);  // the plain row on the tiny weights
    EXPECT_NEAR(y[out + 1], bias[1] - 2.0f, 0.05f) << Int8PathName(path);
  }
}

TEST(Int8Panels, PackingPadsThePanelsWithZerosAndUnpacksToTheMatrix) {
  const int64_t out = 11, in = 5;
  std::vector<int8_t> q(out * in);
  for (int64_t i = 0; i < out * in; ++i) q[i] = static_cast<int8_t>(i % 251 - 125);
  const Int8Panels panels = PackInt8Panels(q.data(), out, in);
  ASSERT_EQ(panels.values.size(), 16u * 8);  // 16 channels by in rounded up to 8
  ASSERT_EQ(panels.column_sums.size(), 16u);
  for (int64_t o = 0; o < 16; ++o) {
    int32_t sum = 0;
    for (int64_t k = 0; k < 8; ++k) {
      const int8_t stored = panels.values[k / 4 * 64 + o * 4 + k % 4];
      const int8_t expected = o < out && k < in ? q[o * in + k] : 0;
      EXPECT_EQ(stored, expected) << o << "," << k;
      sum += expected;
    }
    EXPECT_EQ(panels.column_sums[o], sum) << o;
  }
  std::vector<int8_t> back(out * in);
  UnpackInt8Panels(panels, out, in, back.data());
  EXPECT_EQ(back, q);
}

TEST(Int8Gemm, NoRowsOrOutputsWritesNothing) {
  std::vector<int8_t> q(8, 1);
  const Int8Panels panels = PackInt8Panels(q.data(), 1, 8);
  std::vector<float> scale(1, 1.0f), x(8, 1.0f), y(1, 7.0f);
  Int8Gemm(x.data(), 0, 8, panels, scale.data(), 1, 8, nullptr, y.data(), 1);
  Int8Gemm(x.data(), 1, 8, panels, scale.data(), 0, 8, nullptr, y.data(), 1);
  EXPECT_EQ(y[0], 7.0f);
}

}  // namespace
}  // namespace attn::kernels
