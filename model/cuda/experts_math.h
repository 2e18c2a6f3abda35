// The arithmetic of the experts kernels (state_kernels.cu, cuda::Experts)
// for one lane of a warp, shared with the CPU check of their indexing
// (tests/cuda_experts_math_test.cc), which sums the 32 lanes' parts in
// place of the warp's shuffles. A block serves one expert: it lists the
// choices (row * top_k + k) that chose it, then each warp takes one row of
// the expert's matrices at a time and computes its dot products with up
// to kExpertChoicesAtOnce choices' inputs together, lane l over the
// columns l, l + 32, ..., so that a row of weights is read once for all of
// them.
#pragma once

#include <math.h>  // expf, in host and device code alike

#include <cstdint>
#include <cstring>

#include "model/cuda/state_kernels.h"
#include "model/cuda/step_math.h"

namespace attn::cuda {

// How many choices' sums a lane holds in registers at once.
inline constexpr int kExpertChoicesAtOnce = 8;

// Entry `at` of a matrix of float32, or bf16 (the high half of a float32's
// bits) where `bf16`.
ATTN_HOST_DEVICE inline float ExpertWeight(const void* w, bool bf16, int64_t at) {
  if (!bf16) return static_cast<const float*>(w)[at];
  const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(w)[at]) << 16;
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

// Lists in `choices` the choices of `expert` among the call's rows * top_k,
// in order; returns how many. (The kernel's threads list them in any
// order: each choice's results are its own.)
ATTN_HOST_DEVICE inline int64_t ExpertChoices(const ExpertsArgs& a, int64_t expert,
                                              int64_t* choices) {
  int64_t count = 0;
  for (int64_t i = 0; i < a.rows * a.top_k; ++i) {
    if (a.chosen[i] == expert) choices[count++] = i;
  }
  return count;
}

// Lane's parts of the dot products of row `row` of the [*, width] matrix
// `w` with the `count` (at most kExpertChoicesAtOnce) input rows
// in + inputs[c] * width: parts[c] for c < count.
ATTN_HOST_DEVICE inline void ExpertLaneDots(const void* w, bool bf16, int64_t row, int64_t width,
                                            const float* in, const int64_t* inputs, int count,
                                            int lane, float* parts) {
  for (int c = 0; c < kExpertChoicesAtOnce; ++c) parts[c] = 0.f;
  const int64_t base = row * width;
  for (int64_t col = lane; col < width; col += kWarp) {
    const float weight = ExpertWeight(w, bf16, base + col);
    for (int c = 0; c < kExpertChoicesAtOnce; ++c) {
      if (c < count) parts[c] += weight * in[inputs[c] * width + col];
    }
  }
}

// SwiGLU's hidden unit from its gate and up sums: silu(g) * u.
ATTN_HOST_DEVICE inline float ExpertActivation(float gate, float up) {
  return gate / (1.f + expf(-gate)) * up;
}

// The inputs of choices[first..first + count): their rows of x for the
// hidden stage (`of_rows`), the choices' own rows of act for the output.
ATTN_HOST_DEVICE inline void ExpertInputs(const ExpertsArgs& a, const int64_t* choices,
                                          int64_t first, int count, bool of_rows, int64_t* inputs) {
  for (int c = 0; c < kExpertChoicesAtOnce; ++c) {
    const int64_t choice = c < count ? choices[first + c] : 0;
    inputs[c] = of_rows ? choice / a.top_k : choice;
  }
}

}  // namespace attn::cuda
