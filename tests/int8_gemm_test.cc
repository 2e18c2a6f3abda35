#include "model/kernels/int8_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <tuple>
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

// rows x out x in, with or without a bias.
class Int8GemmTest : public testing::TestWithParam<std::tuple<int, int, int, bool>> {};

// Against the float64 product of the dequantised weights, with padded row
// strides on x and y so that a kernel reading or writing past a row's end
// would show; the bound is float32 accumulation over `in` terms.
TEST_P(Int8GemmTest, MatchesTheDequantisedProductInDouble) {
  const auto [rows, out, in, with_bias] = GetParam();
  std::mt19937 rng(rows * 7919 + out * 31 + in);
  const int64_t ldx = in + 3, ldy = out + 5;
  const std::vector<float> x = Random(rows * ldx, rng), w = Random(out * in, rng, 0.05f);
  const std::vector<float> bias = Random(out, rng);
  std::vector<int8_t> q(out * in);
  std::vector<float> scale(out);
  QuantizeRows(w.data(), out, in, in, q.data(), scale.data());
  const float sentinel = -12345.0f;
  std::vector<float> y(rows * ldy, sentinel);
  Int8Gemm(x.data(), rows, ldx, q.data(), scale.data(), out, in, with_bias ? bias.data() : nullptr,
           y.data(), ldy);
  for (int r = 0; r < rows; ++r) {
    for (int o = 0; o < out; ++o) {
      double expected = with_bias ? bias[o] : 0.0, magnitude = std::abs(expected);
      for (int k = 0; k < in; ++k) {
        const double term = static_cast<double>(scale[o]) * q[o * in + k] * x[r * ldx + k];
        expected += term;
        magnitude += std::abs(term);
      }
      EXPECT_NEAR(y[r * ldy + o], expected, 1.2e-7 * (in + 2) * magnitude + 1e-7)
          << "row " << r << " out " << o;
    }
    for (int64_t pad = out; pad < ldy; ++pad) ASSERT_EQ(y[r * ldy + pad], sentinel);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Int8GemmTest,
                         testing::Combine(testing::Values(1, 2, 3, 5), testing::Values(1, 4, 13),
                                          testing::Values(1, 7, 8, 37, 256), testing::Bool()));

// Large enough to run on several threads: the bundled models' widest
// projection, at a decode batch.
INSTANTIATE_TEST_SUITE_P(Parallel, Int8GemmTest,
                         testing::Values(std::make_tuple(1, 1024, 256, true),
                                         std::make_tuple(4, 1024, 256, false),
                                         std::make_tuple(64, 256, 1024, true)));

TEST(Int8Gemm, NoRowsOrOutputsWritesNothing) {
  std::vector<int8_t> q(8, 1);
  std::vector<float> scale(1, 1.0f), x(8, 1.0f), y(1, 7.0f);
  Int8Gemm(x.data(), 0, 8, q.data(), scale.data(), 1, 8, nullptr, y.data(), 1);
  Int8Gemm(x.data(), 1, 8, q.data(), scale.data(), 0, 8, nullptr, y.data(), 1);
  EXPECT_EQ(y[0], 7.0f);
}

}  // namespace
}  // namespace attn::kernels
