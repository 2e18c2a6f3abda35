#include "model/kernels/int8_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
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

// Against the float64 product of the dequantised weights, with padded row
// strides on x and y so that a kernel reading or writing past a row's end
// would show; the bound is float32 accumulation over `in` terms.
using Product = decltype(&Int8Gemm);

void ExpectMatchesTheDequantisedProduct(int rows, int out, int in, bool with_bias,
                                        Product product = Int8Gemm) {
  SCOPED_TRACE(testing::Message() << rows << " rows, out " << out << ", in " << in
                                  << (with_bias ? ", bias" : "")
                                  << (product == Int8Gemm ? "" : ", baseline loops"));
  std::mt19937 rng(rows * 7919 + out * 31 + in);
  const int64_t ldx = in + 3, ldy = out + 5;
  const std::vector<float> x = Random(rows * ldx, rng), w = Random(out * in, rng, 0.05f);
  const std::vector<float> bias = Random(out, rng);
  std::vector<int8_t> q(out * in);
  std::vector<float> scale(out);
  QuantizeRows(w.data(), out, in, in, q.data(), scale.data());
  std::vector<int8_t> panels(Int8PanelBytes(out, in));
  PackInt8Panels(q.data(), out, in, panels.data());
  const float sentinel = -12345.0f;
  std::vector<float> y(rows * ldy, sentinel);
  product(x.data(), rows, ldx, panels.data(), scale.data(), out, in,
          with_bias ? bias.data() : nullptr, y.data(), ldy);
  for (int r = 0; r < rows; ++r) {
    for (int o = 0; o < out; ++o) {
      double expected = with_bias ? bias[o] : 0.0, magnitude = std::abs(expected);
      for (int k = 0; k < in; ++k) {
        const double term = static_cast<double>(scale[o]) * q[o * in + k] * x[r * ldx + k];
        expected += term;
        magnitude += std::abs(term);
      }
      ASSERT_NEAR(y[r * ldy + o], expected, 1.2e-7 * (in + 2) * magnitude + 1e-7)
          << "row " << r << " out " << o;
    }
    for (int64_t pad = out; pad < ldy; ++pad) ASSERT_EQ(y[r * ldy + pad], sentinel);
  }
}

// Through the loops this CPU runs and through the baseline loops. Rows
// cover every tile (4, 2 and 1 rows) and their mixes; outputs cover a
// partial panel, whole panels, groups of four panels and the groups of one
// to three left at a range's end; inputs cover the eight-step passes and
// their remainders.
TEST(Int8Gemm, MatchesTheDequantisedProductInDoubleForEveryTile) {
  for (int rows : {1, 2, 3, 4, 5, 7, 9}) {
    for (int out : {1, 4, 8, 13, 24, 41}) {
      for (int in : {1, 3, 7, 8, 37, 256}) {
        for (bool with_bias : {false, true}) {
          ExpectMatchesTheDequantisedProduct(rows, out, in, with_bias);
          if (HasFatalFailure()) return;
          ExpectMatchesTheDequantisedProduct(rows, out, in, with_bias, Int8GemmBaseline);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// Large enough to run on several threads: the bundled models' widest
// projection, at decode batches.
TEST(Int8Gemm, MatchesTheDequantisedProductInDoubleOnSeveralThreads) {
  ExpectMatchesTheDequantisedProduct(1, 1024, 256, true);
  ExpectMatchesTheDequantisedProduct(4, 1024, 256, false);
  ExpectMatchesTheDequantisedProduct(64, 256, 1024, true);
  ExpectMatchesTheDequantisedProduct(127, 200, 160, true);
}

TEST(Int8Panels, PackingPadsThePanelsWithZerosAndUnpacksToTheMatrix) {
  const int64_t out = 11, in = 5;
  std::vector<int8_t> q(out * in);
  for (int64_t i = 0; i < out * in; ++i) q[i] = static_cast<int8_t>(i % 251 - 125);
  ASSERT_EQ(Int8PanelBytes(out, in), 16 * in);
  std::vector<int8_t> panels(Int8PanelBytes(out, in), 99);
  PackInt8Panels(q.data(), out, in, panels.data());
  for (int64_t o = 0; o < 16; ++o) {
    for (int64_t k = 0; k < in; ++k) {
      const int8_t stored = panels[o / 8 * 8 * in + k * 8 + o % 8];
      EXPECT_EQ(stored, o < out ? q[o * in + k] : 0) << o << "," << k;
    }
  }
  std::vector<int8_t> back(out * in);
  UnpackInt8Panels(panels.data(), out, in, back.data());
  EXPECT_EQ(back, q);
}

TEST(Int8Gemm, NoRowsOrOutputsWritesNothing) {
  std::vector<int8_t> q(8, 1);
  std::vector<float> scale(1, 1.0f), x(8, 1.0f), y(1, 7.0f);
  Int8Gemm(x.data(), 0, 8, q.data(), scale.data(), 1, 8, nullptr, y.data(), 1);
  Int8Gemm(x.data(), 1, 8, q.data(), scale.data(), 0, 8, nullptr, y.data(), 1);
  EXPECT_EQ(y[0], 7.0f);
}

}  // namespace
}  // namespace attn::kernels
