#include "model/kernels/bf16_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace attn::kernels {
namespace {

uint32_t Bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Round to nearest, ties to even, in double: the two bf16 neighbours of v
// (its bits truncated, and that plus one step) and the nearer of them.
float NearestBf16(float v) {
  const float below = FromBits(Bits(v) & 0xFFFF0000u);
  const float above = FromBits((Bits(v) & 0xFFFF0000u) + 0x10000u);
  const double to_below = std::abs(static_cast<double>(v) - below);
  const double to_above = std::abs(static_cast<double>(above) - v);
  if (to_below != to_above) return to_below < to_above ? below : above;
  return (Bits(below) >> 16) % 2 == 0 ? below : above;
}

TEST(RoundToBf16, IsNearestWithTiesToEvenAndWidensExactly) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> any_bits;
  int checked = 0;
  while (checked < 100000) {
    const float v = FromBits(any_bits(rng));
    if (!std::isfinite(v) || std::abs(v) > 3.0e38f) continue;
    ASSERT_EQ(Bits(Bf16ToFloat(RoundToBf16(v))), Bits(NearestBf16(v))) << v;
    ++checked;
  }
  // Exact ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 and goes to the
  // even 1; 1 + 3 * 2^-8 halfway between 1 + 2^-7 and 1 + 2^-6 goes up.
  EXPECT_EQ(Bf16ToFloat(RoundToBf16(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(Bf16ToFloat(RoundToBf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  EXPECT_EQ(Bf16ToFloat(RoundToBf16(-2.5f)), -2.5f);  // representable: unchanged
  EXPECT_EQ(Bf16ToFloat(RoundToBf16(0.0f)), 0.0f);
  // Beyond the largest bf16 the rounding gives infinity.
  EXPECT_TRUE(std::isinf(Bf16ToFloat(RoundToBf16(std::numeric_limits<float>::max()))));
  // A NaN stays one, even with every mantissa bit set (where the rounding's
  // carry would run into the sign).
  EXPECT_TRUE(std::isnan(Bf16ToFloat(RoundToBf16(FromBits(0x7FFFFFFFu)))));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(RoundToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Bf16Panels, UnpackGivesBackWhatWasPacked) {
  const int64_t out = 21, in = 5;
  std::vector<uint16_t> w(out * in), back(out * in);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint16_t>(i * 37 + 1);
  const Bf16Panels panels = PackBf16Panels(w.data(), out, in);
  // One group, in padded to whole pairs: 64 x 6 values.
  EXPECT_EQ(panels.values.size(), static_cast<size_t>(64 * (in + 1)));
  UnpackBf16Panels(panels, out, in, back.data());
  EXPECT_EQ(back, w);
}

// The paths this CPU runs, baseline first.
std::vector<Bf16Path> Paths() {
  std::vector<Bf16Path> paths;
  for (Bf16Path path :
       {Bf16Path::kBaseline, Bf16Path::kAvx2, Bf16Path::kAvx512, Bf16Path::kAvx512Bf16}) {
    if (CpuRuns(path)) paths.push_back(path);
  }
  return paths;
}

struct Case {
  int rows, out, in;
  bool with_bias;
};

// Against the float64 product of the rounded activations and weights, with padded row
// strides on x and y so that a kernel reading or writing past a row's end
// would show: within float32 summation error (|y - ref| <= in * 2^-23 *
// sum |x W| + a little), on every path this machine runs. Shapes cover
// partial panels, partial groups of panels and every tile height.
TEST(Bf16Gemm, EveryPathEqualsTheFloat64ProductOfTheRoundedWeights) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::vector<Case> cases = {{1, 16, 8, false},  {1, 1000, 257, true}, {3, 70, 33, true},
                                   {7, 64, 64, false}, {13, 200, 96, true},  {64, 129, 40, true},
                                   {2, 5, 3, false},   {6, 96, 128, true}};
  for (Bf16Path path : Paths()) {
    for (const Case& c : cases) {
      const int64_t ldx = c.in + 3, ldy = c.out + 5;
      std::vector<float> x(c.rows * ldx), bias(c.out), y(c.rows * ldy, -7.0f);
      std::vector<uint16_t> w(c.out * c.in);
      for (float& v : x) v = normal(rng);
      for (float& v : bias) v = normal(rng);
      for (uint16_t& v : w) v = RoundToBf16(0.1f * normal(rng));
      const Bf16Panels panels = PackBf16Panels(w.data(), c.out, c.in);
      Bf16GemmOn(path, x.data(), c.rows, ldx, panels, c.out, c.in,
                 c.with_bias ? bias.data() : nullptr, y.data(), ldy);
      for (int r = 0; r < c.rows; ++r) {
        for (int o = 0; o < c.out; ++o) {
          double ref = c.with_bias ? bias[o] : 0.0, magnitude = std::abs(ref);
          for (int k = 0; k < c.in; ++k) {
            const double term = static_cast<double>(Bf16ToFloat(RoundToBf16(x[r * ldx + k]))) *
                                Bf16ToFloat(w[o * c.in + k]);
            ref += term;
            magnitude += std::abs(term);
          }
          ASSERT_NEAR(y[r * ldy + o], ref, 1e-6 * c.in * magnitude + 1e-30)
              << Bf16PathName(path) << " rows " << c.rows << " out " << c.out << " in " << c.in
              << " at " << r << "," << o;
        }
        for (int64_t o = c.out; o < ldy; ++o) ASSERT_EQ(y[r * ldy + o], -7.0f) << "wrote past";
      }
    }
  }
}

// One row alone gives the same floats, bit for bit, as that row inside a
// batch of any height: a stream's tokens do not depend on its neighbours,
// and a prefill's rows equal the decode steps'.
TEST(Bf16Gemm, ARowsResultDoesNotDependOnTheRowsBesideIt) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t out = 150, in = 70, rows = 29;
  std::vector<float> x(rows * in), bias(out), batched(rows * out), alone(out);
  std::vector<uint16_t> w(out * in);
  for (float& v : x) v = normal(rng);
  for (float& v : bias) v = normal(rng);
  for (uint16_t& v : w) v = RoundToBf16(normal(rng));
  const Bf16Panels panels = PackBf16Panels(w.data(), out, in);
  for (Bf16Path path : Paths()) {
    Bf16GemmOn(path, x.data(), rows, in, panels, out, in, bias.data(), batched.data(), out);
    for (int64_t r = 0; r < rows; ++r) {
      Bf16GemmOn(path, x.data() + r * in, 1, in, panels, out, in, bias.data(), alone.data(), out);
      for (int64_t o = 0; o < out; ++o) {
        ASSERT_EQ(Bits(alone[o]), Bits(batched[r * out + o]))
            << Bf16PathName(path) << " row " << r << " output " << o;
      }
    }
  }
}

// Every path runs the same float32 adds in the same order (bf16_gemm.h):
// on values far from subnormal, the same floats as the baseline, bit for
// bit, so a model's tokens do not depend on the machine's instruction set.
TEST(Bf16Gemm, EveryPathGivesTheBaselinesFloatsBitForBit) {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t out = 200, in = 131, rows = 9;
  std::vector<float> x(rows * in), bias(out), baseline(rows * out), y(rows * out);
  std::vector<uint16_t> w(out * in);
  for (float& v : x) v = normal(rng);
  for (float& v : bias) v = normal(rng);
  for (uint16_t& v : w) v = RoundToBf16(normal(rng));
  const Bf16Panels panels = PackBf16Panels(w.data(), out, in);
  Bf16GemmOn(Bf16Path::kBaseline, x.data(), rows, in, panels, out, in, bias.data(), baseline.data(),
             out);
  for (Bf16Path path : Paths()) {
    Bf16GemmOn(path, x.data(), rows, in, panels, out, in, bias.data(), y.data(), out);
    for (int64_t i = 0; i < rows * out; ++i) {
      ASSERT_EQ(Bits(y[i]), Bits(baseline[i])) << Bf16PathName(path) << " at " << i;
    }
  }
}

TEST(Bf16Gemm, TheChosenPathIsOneThisCpuRuns) {
  EXPECT_TRUE(CpuRuns(Bf16GemmPath()));
  EXPECT_TRUE(CpuRuns(Bf16Path::kBaseline));
  std::printf("bf16 product path on this CPU: %s\n", Bf16PathName(Bf16GemmPath()));
}

}  // namespace
}  // namespace attn::kernels
