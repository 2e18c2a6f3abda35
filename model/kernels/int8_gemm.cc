#include "model/kernels/int8_gemm.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "model/kernels/kernel_common.h"

namespace attn::kernels {

// int8_gemm_avx2.cc: the same loops compiled with -mavx2 -mfma.
void RunPanelsAvx2(int64_t begin, int64_t end, const float* x, int64_t rows, int64_t ldx,
                   const int8_t* panels, const float* scale, int64_t out, int64_t in,
                   const float* bias, float* y, int64_t ldy);

namespace {
namespace baseline {
#include "model/kernels/int8_gemm_body.h"
}  // namespace baseline

// Whether this CPU runs the AVX2 loops. Explicit dispatch rather than
// ATTN_HOT's clones: GCC lowers the int8-to-float conversion of its vector
// extensions to scalar code, so the AVX2 loops are written with intrinsics,
// which only a file compiled for AVX2 may use.
bool HasAvx2() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

}  // namespace

void QuantizeRows(const float* w, int64_t out, int64_t in, int64_t ldw, int8_t* q, float* scale) {
  for (int64_t o = 0; o < out; ++o) {
    const float* row = w + o * ldw;
    float largest = 0.0f;
    for (int64_t k = 0; k < in; ++k) largest = std::max(largest, std::abs(row[k]));
    const float s = largest > 0.0f ? largest / 127.0f : 1.0f;
    scale[o] = s;
    for (int64_t k = 0; k < in; ++k) {
      const float level = std::nearbyint(row[k] / s);
      q[o * in + k] = static_cast<int8_t>(std::clamp(level, -127.0f, 127.0f));
    }
  }
}

int64_t Int8PanelBytes(int64_t out, int64_t in) {
  return (out + kInt8PanelWidth - 1) / kInt8PanelWidth * kInt8PanelWidth * in;
}

namespace {
// Where Q[o, 0] sits in the panel layout; Q[o, k] is kInt8PanelWidth * k
// bytes further.
int64_t PanelOffset(int64_t o, int64_t in) {
  return o / kInt8PanelWidth * kInt8PanelWidth * in + o % kInt8PanelWidth;
}
}  // namespace

void PackInt8Panels(const int8_t* q, int64_t out, int64_t in, int8_t* panels) {
  std::memset(panels, 0, Int8PanelBytes(out, in));
  for (int64_t o = 0; o < out; ++o) {
    int8_t* panel = panels + PanelOffset(o, in);
    for (int64_t k = 0; k < in; ++k) panel[k * kInt8PanelWidth] = q[o * in + k];
  }
}

void UnpackInt8Panels(const int8_t* panels, int64_t out, int64_t in, int8_t* q) {
  for (int64_t o = 0; o < out; ++o) {
    const int8_t* panel = panels + PanelOffset(o, in);
    for (int64_t k = 0; k < in; ++k) q[o * in + k] = panel[k * kInt8PanelWidth];
  }
}

bool Int8GemmUsesAvx2() { return HasAvx2(); }

namespace {
void RunInt8Gemm(bool avx2, const float* x, int64_t rows, int64_t ldx, const int8_t* panels,
                 const float* scale, int64_t out, int64_t in, const float* bias, float* y,
                 int64_t ldy) {
  static_assert(baseline::kPanel == kInt8PanelWidth);
  if (rows <= 0 || out <= 0) return;
  const int64_t count = (out + kInt8PanelWidth - 1) / kInt8PanelWidth;
  at::parallel_for(
      0, count, GrainFor(kInt8PanelWidth * in * rows), [&](int64_t begin, int64_t end) {
        if (avx2) {
          RunPanelsAvx2(begin, end, x, rows, ldx, panels, scale, out, in, bias, y, ldy);
        } else {
          baseline::RunPanels(begin, end, x, rows, ldx, panels, scale, out, in, bias, y, ldy);
        }
      });
}
}  // namespace

void Int8Gemm(const float* x, int64_t rows, int64_t ldx, const int8_t* panels, const float* scale,
              int64_t out, int64_t in, const float* bias, float* y, int64_t ldy) {
  RunInt8Gemm(HasAvx2(), x, rows, ldx, panels, scale, out, in, bias, y, ldy);
}

void Int8GemmBaseline(const float* x, int64_t rows, int64_t ldx, const int8_t* panels,
                      const float* scale, int64_t out, int64_t in, const float* bias, float* y,
                      int64_t ldy) {
  RunInt8Gemm(false, x, rows, ldx, panels, scale, out, in, bias, y, ldy);
}

}  // namespace attn::kernels
