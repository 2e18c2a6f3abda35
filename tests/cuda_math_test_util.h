// What the CPU checks of the CUDA kernels' arithmetic share
// (tests/cuda_step_math_test.cc and cuda_step_rows_math_test.cc): random
// inputs, outputs no kernel has written yet, and their tolerance against
// float64.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace attn::cuda_test {

inline std::vector<float> Random(int64_t size, float low, float high, std::mt19937& gen) {
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> values(size);
  for (float& v : values) v = uniform(gen);
  return values;
}

// Written by the kernels: NaN until then, so a column no lane writes fails.
inline std::vector<float> Unwritten(int64_t size) {
  return std::vector<float>(size, std::numeric_limits<float>::quiet_NaN());
}

inline void ExpectClose(double got, double want, const char* what, int64_t at) {
  EXPECT_NEAR(got, want, 1e-5 + 1e-5 * std::fabs(want)) << what << " at " << at;
}

}  // namespace attn::cuda_test
