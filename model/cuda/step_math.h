// The arithmetic of the step kernels (state_kernels.cu) for one lane of a
// warp, shared with the CPU check of their indexing
// (tests/cuda_step_math_test.cc), which sums the 32 lanes' parts in place of
// the warp's shuffles. A block serves one (row, head), block = row * heads +
// head; a warp one channel of S at a time; lane l the state columns l,
// l + 32, ...
#pragma once

#include <math.h>  // expf, in host and device code alike

#include <cstdint>

#include "model/cuda/state_kernels.h"

#ifdef __CUDACC__
#define ATTN_HOST_DEVICE __host__ __device__
#else
#define ATTN_HOST_DEVICE
#endif

namespace attn::cuda {

inline constexpr int kWarp = 32;

// Mamba-2: updates lane's columns of S's row p and returns their part of
// (S C)_p.
ATTN_HOST_DEVICE inline float Mamba2LanePart(const Mamba2StepArgs& a, int64_t block, int64_t p,
                                             int lane) {
  const int64_t row = block / a.heads, head = block % a.heads;
  const int64_t group = head / (a.heads / a.groups);
  const float dt = a.dt[block];
  const float decay = expf(-expf(a.a_log[head]) * dt);
  const float* b = a.b + (row * a.groups + group) * a.state_size;
  const float* c = a.c + (row * a.groups + group) * a.state_size;
  const int64_t channel = block * a.head_dim + p;
  const float dtx = dt * a.x[channel];
  const float* s_in = a.s_in + channel * a.state_size;
  float* s_out = a.s_out + channel * a.state_size;
  float part = 0.f;
  for (int64_t n = lane; n < a.state_size; n += kWarp) {
    const float updated = s_in[n] * decay + dtx * b[n];
    s_out[n] = updated;
    part += updated * c[n];
  }
  return part;
}

// Mamba-2: y_p from the lanes' summed parts.
ATTN_HOST_DEVICE inline void Mamba2Output(const Mamba2StepArgs& a, int64_t block, int64_t p,
                                          float sum) {
  const int64_t channel = block * a.head_dim + p;
  a.y[channel] = sum + a.d[block % a.heads] * a.x[channel];
}

// RWKV-7: lane's part of (S kk)_i, which must be whole before S changes.
ATTN_HOST_DEVICE inline float Rwkv7RemovedPart(const Rwkv7StepArgs& a, int64_t block, int64_t i,
                                               int lane) {
  const int64_t n = a.head_dim, head0 = block * n;
  const float* s_in = a.s_in + (head0 + i) * n;
  float part = 0.f;
  for (int64_t j = lane; j < n; j += kWarp) part += s_in[j] * a.kk[head0 + j];
  return part;
}

// RWKV-7: updates lane's columns of S's row i, given all of (S kk)_i, and
// returns their part of o_i = (S r)_i.
ATTN_HOST_DEVICE inline float Rwkv7UpdatePart(const Rwkv7StepArgs& a, int64_t block, int64_t i,
                                              int lane, float removed) {
  const int64_t n = a.head_dim, head0 = block * n;
  const float* s_in = a.s_in + (head0 + i) * n;
  float* s_out = a.s_out + (head0 + i) * n;
  const float v = a.v[head0 + i];
  float part = 0.f;
  for (int64_t j = lane; j < n; j += kWarp) {
    const int64_t at = head0 + j;
    const float updated = s_in[j] * a.w[at] - removed * a.kk[at] * a.iclr[at] + v * a.k[at];
    s_out[j] = updated;
    part += updated * a.r[at];
  }
  return part;
}

}  // namespace attn::cuda
