#include "model/kernels/packed_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

namespace attn::kernels {
namespace {

std::vector<float> Random(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Checks y against a naive loop in double: each row's outputs, and the
// sentinel left in the padding past each row's end.
void ExpectNaiveProduct(const std::vector<float>& x, int64_t ldx, const std::vector<float>& w,
                        int64_t ldw, const float* bias, const std::vector<float>& y, int64_t ldy,
                        int rows, int out, int in, float sentinel) {
  for (int r = 0; r < rows; ++r) {
    for (int o = 0; o < out; ++o) {
      double expected = bias != nullptr ? bias[o] : 0.0;
      double magnitude = std::abs(expected);
      for (int k = 0; k < in; ++k) {
        expected += static_cast<double>(x[r * ldx + k]) * w[o * ldw + k];
        magnitude += std::abs(static_cast<double>(x[r * ldx + k]) * w[o * ldw + k]);
      }
      ASSERT_NEAR(y[r * ldy + o], expected, 1e-6 * magnitude + 1e-6)
          << "row " << r << " column " << o;
    }
    for (int64_t o = out; o < ldy; ++o) {
      ASSERT_EQ(y[r * ldy + o], sentinel) << "wrote past row " << r << "'s end";
    }
  }
}

// PackedGemm and each path this CPU runs against a naive loop in double, on
// random matrices with these row strides.
void ExpectEveryPathGivesTheNaiveProduct(int rows, int out, int in, int64_t ldx, int64_t ldw,
                                         int64_t ldy, bool with_bias) {
  std::mt19937 rng(rows * 7919 + out * 31 + in);
  const std::vector<float> x = Random(rows * ldx, rng), w = Random(out * ldw, rng);
  const std::vector<float> bias = Random(out, rng);
  const float* b = with_bias ? bias.data() : nullptr;
  std::vector<float> packed(PackedWeightSize(out, in));
  PackWeight(w.data(), out, in, ldw, packed.data());
  const float sentinel = -12345.0f;
  std::vector<float> y(rows * ldy, sentinel);
  PackedGemm(x.data(), rows, ldx, packed.data(), out, in, b, y.data(), ldy);
  ExpectNaiveProduct(x, ldx, w, ldw, b, y, ldy, rows, out, in, sentinel);
  for (const PackedPath path : {PackedPath::kVectorTiles, PackedPath::kAvx2}) {
    if (!CpuRuns(path)) continue;
    SCOPED_TRACE(PackedPathName(path));
    std::fill(y.begin(), y.end(), sentinel);
    PackedGemmOn(path, x.data(), rows, ldx, packed.data(), out, in, b, y.data(), ldy);
    ExpectNaiveProduct(x, ldx, w, ldw, b, y, ldy, rows, out, in, sentinel);
  }
}

// rows x out x in, with or without a bias.
class PackedGemmTest : public testing::TestWithParam<std::tuple<int, int, int, bool>> {};

// With padded row strides on every matrix, so that a kernel reading or
// writing past a row's end would show.
TEST_P(PackedGemmTest, MatchesANaiveLoop) {
  const auto [rows, out, in, with_bias] = GetParam();
  ExpectEveryPathGivesTheNaiveProduct(rows, out, in, in + 3, in + 5, out + 7, with_bias);
}

// Row counts around the 12-row and 6-row tiles, columns around the 32-wide
// panel and its 16-wide halves, one row (its own loop, four or two steps of
// the inputs at a time: inputs that are and are not a multiple of them),
// the model's shapes (160 in, 480/640/4096 out; 640 in), and panels whose
// inputs the next panel's prefetch splits among more tiles than it has
// inputs, or unevenly.
INSTANTIATE_TEST_SUITE_P(
    Shapes, PackedGemmTest,
    testing::Values(std::make_tuple(1, 1, 1, true), std::make_tuple(1, 160, 160, true),
                    std::make_tuple(1, 33, 7, false), std::make_tuple(1, 4096, 160, false),
                    std::make_tuple(1, 70, 643, true), std::make_tuple(2, 33, 7, false),
                    std::make_tuple(11, 31, 16, true), std::make_tuple(12, 32, 17, true),
                    std::make_tuple(13, 65, 160, false), std::make_tuple(25, 96, 3, true),
                    std::make_tuple(64, 480, 160, true), std::make_tuple(64, 160, 640, true),
                    std::make_tuple(64, 4096, 160, false), std::make_tuple(256, 640, 160, true),
                    std::make_tuple(7, 1000, 33, true), std::make_tuple(1, 20, 5, true),
                    std::make_tuple(1, 16, 2, false), std::make_tuple(6, 16, 9, true),
                    std::make_tuple(5, 17, 4, false), std::make_tuple(18, 48, 31, true),
                    std::make_tuple(61, 40, 2, false), std::make_tuple(51, 70, 643, true)));

// Rows a multiple of 4 KiB apart, which the product reads from a copy spread
// a cache line further apart (packed_gemm.cc): with inputs filling the rows
// and inputs short of them, more than one tile of rows and a last tile part
// full, against the naive loop on every path.
TEST(PackedGemmStrides, RowsWholePagesApartGiveTheNaiveProduct) {
  for (const auto& [rows, in, ldx] :
       {std::make_tuple(25, 1024, 1024), std::make_tuple(13, 1000, 2048),
        std::make_tuple(57, 1024, 1024)}) {
    SCOPED_TRACE(testing::Message() << rows << " rows of " << in << " inputs, stride " << ldx);
    ExpectEveryPathGivesTheNaiveProduct(rows, 300, in, ldx, in, 301, rows != 13);
  }
}

// The path PackedGemm takes is one this CPU runs, and the product counts as
// fast exactly where the CPU has AVX2 (with FMA) or AVX-512.
TEST(PackedGemmPath, IsOneTheCpuRuns) {
  EXPECT_TRUE(CpuRuns(PackedGemmPath()));
  EXPECT_TRUE(CpuRuns(PackedPath::kVectorTiles));
  EXPECT_EQ(PackedGemmIsFast(), CpuRuns(PackedPath::kAvx2));
}

TEST(PackedWeight, PanelsHoldColumnsInOrderAndZerosBeyondTheMatrix) {
  const int64_t out = 34, in = 3;
  std::vector<float> w(out * in);
  for (int64_t i = 0; i < out * in; ++i) w[i] = static_cast<float>(i + 1);
  std::vector<float> packed(PackedWeightSize(out, in), -1.0f);
  ASSERT_EQ(packed.size(), 2u * in * kPanelWidth);
  PackWeight(w.data(), out, in, in, packed.data());
  // Panel 1, step k, lane j holds W[32 + j, k].
  EXPECT_EQ(packed[in * kPanelWidth + 2 * kPanelWidth + 1], w[33 * in + 2]);
  EXPECT_EQ(packed[0 * kPanelWidth + 5], w[5 * in + 0]);
  EXPECT_EQ(packed[in * kPanelWidth + 0 * kPanelWidth + 2], 0.0f);  // column 34 does not exist
}

}  // namespace
}  // namespace attn::kernels
