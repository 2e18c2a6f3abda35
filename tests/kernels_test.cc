#include "model/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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

}  // namespace
}  // namespace attn::kernels
