#include "model/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
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

}  // namespace
}  // namespace attn::kernels
