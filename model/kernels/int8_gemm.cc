#include "model/kernels/int8_gemm.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "model/kernels/cpu_features.h"
#include "model/kernels/int8_tiles.h"
#include "model/kernels/kernel_common.h"

namespace attn::kernels {
namespace {

using int8_tiles::kMaxPanels;
using int8_tiles::kMaxRows;
using int8_tiles::kWidth;

int64_t RoundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Where Q[o, k] sits in the panel layout (int8_gemm.h).
int64_t PanelIndex(int64_t o, int64_t k, int64_t k4) {
  return o / kInt8PanelWidth * kInt8PanelWidth * k4 + k / 4 * 4 * kInt8PanelWidth +
         o % kInt8PanelWidth * 4 + k % 4;
}

// The portable path: the same sums in scalar code.
void DotTileBaseline(int rows, const int8_t* a, int64_t k4, const int8_t* w, int panels,
                     const int32_t* /*column_sums*/, int32_t* sums) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < panels * kInt8PanelWidth; ++j) {
      const int8_t* panel = w + j / kInt8PanelWidth * kInt8PanelWidth * k4;
      const int lane = j % kInt8PanelWidth;
      int32_t sum = 0;
      for (int64_t k = 0; k < k4; ++k) {
        sum += static_cast<int32_t>(a[r * k4 + k]) * panel[k / 4 * 64 + lane * 4 + k % 4];
      }
      sums[r * kWidth + j] = sum;
    }
  }
}

int8_tiles::DotTile TileFor(Int8Path path) {
  switch (path) {
    case Int8Path::kAvx512Vnni:
      return int8_tiles::DotTileAvx512Vnni;
    case Int8Path::kAvx2:
      return int8_tiles::DotTileAvx2;
    case Int8Path::kBaseline:
      break;
  }
  return DotTileBaseline;
}

// One activation row: t = max |x| / 127 and a = round(x / t), zero past in.
// Both loops vectorise: a non-finite x shows as a NaN in `probe` (x * 0),
// and rounding adds and subtracts 1.5 * 2^23, which rounds to the nearest
// integer, ties to even, as nearbyint does for |v| <= 127 (std::nearbyint
// itself is a call per element where the baseline has no SSE4.1 round).
void QuantizeRow(const float* x, int64_t in, int64_t k4, int8_t* a, float* t) {
  float largest = 0.0f, probe = 0.0f;
#pragma omp simd reduction(max : largest) reduction(+ : probe)
  for (int64_t k = 0; k < in; ++k) {
    largest = std::max(largest, std::abs(x[k]));
    probe += x[k] * 0.0f;
  }
  std::memset(a, 0, k4);
  if (std::isnan(probe)) {
    *t = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  *t = largest / 127.0f;
  const float inverse = 127.0f / largest, magic = 12582912.0f;  // 1.5 * 2^23
  // A row whose largest value is below about 3.7e-37 has no finite inverse:
  // its product is zero to float precision, and so are its levels.
  if (!std::isfinite(inverse)) return;
#pragma omp simd
  for (int64_t k = 0; k < in; ++k) {
    const float level = (x[k] * inverse + magic) - magic;
    a[k] = static_cast<int8_t>(std::clamp(level, -127.0f, 127.0f));
  }
}

// y for `rows` rows (at most kMaxRows) and `width` channels from a tile's
// sums: t_r s_o sum + b_o.
void StoreTile(const int32_t* sums, int rows, int width, const float* t, const float* scale,
               const float* bias, float* y, int64_t ldy) {
  for (int r = 0; r < rows; ++r) {
    float* out = y + r * ldy;
    const int32_t* row = sums + r * kWidth;
    const float tr = t[r];
#pragma omp simd
    for (int j = 0; j < width; ++j) {
      out[j] = tr * scale[j] * static_cast<float>(row[j]) + (bias ? bias[j] : 0.0f);
    }
  }
}

struct Operands {
  const int8_t* a;  // [rows, k4]
  const float* t;   // [rows]
  int64_t rows, k4;
  const Int8Panels* panels;
  const float* scale;
  int64_t out;
  const float* bias;
  float* y;
  int64_t ldy;
};

// Panels [begin, end) for every row, in groups of up to kMaxPanels panels;
// within a group, tiles of up to kMaxRows rows read the group's weights,
// which stay in the core's cache while the rows pass.
void RunPanels(int8_tiles::DotTile dot, const Operands& op, int64_t begin, int64_t end) {
  alignas(64) int32_t sums[kMaxRows * kWidth];
  for (int64_t p = begin; p < end;) {
    const int count = static_cast<int>(std::min<int64_t>(end - p, kMaxPanels));
    const int64_t first = p * kInt8PanelWidth;
    const int width = static_cast<int>(std::min<int64_t>(op.out - first, count * kInt8PanelWidth));
    const int8_t* w = op.panels->values.data() + first * op.k4;
    const int32_t* column_sums = op.panels->column_sums.data() + first;
    for (int64_t r = 0; r < op.rows; r += kMaxRows) {
      const int tile = static_cast<int>(std::min<int64_t>(op.rows - r, kMaxRows));
      dot(tile, op.a + r * op.k4, op.k4, w, count, column_sums, sums);
      StoreTile(sums, tile, width, op.t + r, op.scale + first, op.bias ? op.bias + first : nullptr,
                op.y + r * op.ldy + first, op.ldy);
    }
    p += count;
  }
}

}  // namespace

void QuantizeRows(const float* w, int64_t out, int64_t in, int64_t ldw, int8_t* q, float* scale) {
  for (int64_t o = 0; o < out; ++o) {
    const float* row = w + o * ldw;
    float largest = 0.0f;
    for (int64_t k = 0; k < in; ++k) largest = std::max(largest, std::abs(row[k]));
    // A row so small that its scale underflows to zero quantises to zeros.
    const float s = largest / 127.0f > 0.0f ? largest / 127.0f : 1.0f;
    scale[o] = s;
    for (int64_t k = 0; k < in; ++k) {
      const float level = std::nearbyint(row[k] / s);
      q[o * in + k] = static_cast<int8_t>(std::clamp(level, -127.0f, 127.0f));
    }
  }
}

Int8Panels PackInt8Panels(const int8_t* q, int64_t out, int64_t in) {
  const int64_t k4 = RoundUp(in, 4), padded = RoundUp(out, kInt8PanelWidth);
  Int8Panels panels;
  panels.values.assign(padded * k4, 0);
  panels.column_sums.assign(padded, 0);
  for (int64_t o = 0; o < out; ++o) {
    int32_t sum = 0;
    for (int64_t k = 0; k < in; ++k) {
      panels.values[PanelIndex(o, k, k4)] = q[o * in + k];
      sum += q[o * in + k];
    }
    panels.column_sums[o] = sum;
  }
  return panels;
}

void UnpackInt8Panels(const Int8Panels& panels, int64_t out, int64_t in, int8_t* q) {
  const int64_t k4 = RoundUp(in, 4);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t k = 0; k < in; ++k) q[o * in + k] = panels.values[PanelIndex(o, k, k4)];
  }
}

bool CpuRuns(Int8Path path) {
  switch (path) {
    case Int8Path::kAvx512Vnni:
      return CpuHasAvx512Vnni();
    case Int8Path::kAvx2:
      return CpuHasAvx2();
    case Int8Path::kBaseline:
      break;
  }
  return true;
}

Int8Path Int8GemmPath() {
  if (CpuRuns(Int8Path::kAvx512Vnni)) return Int8Path::kAvx512Vnni;
  return CpuRuns(Int8Path::kAvx2) ? Int8Path::kAvx2 : Int8Path::kBaseline;
}

const char* Int8PathName(Int8Path path) {
  switch (path) {
    case Int8Path::kAvx512Vnni:
      return "AVX-512 VNNI";
    case Int8Path::kAvx2:
      return "AVX2";
    case Int8Path::kBaseline:
      break;
  }
  return "baseline";
}

void QuantizeActivations(const float* x, int64_t rows, int64_t ldx, int64_t in, int8_t* a,
                         float* t) {
  for (int64_t r = 0; r < rows; ++r) QuantizeRow(x + r * ldx, in, in, a + r * in, t + r);
}

void Int8GemmOn(Int8Path path, const float* x, int64_t rows, int64_t ldx, const Int8Panels& panels,
                const float* scale, int64_t out, int64_t in, const float* bias, float* y,
                int64_t ldy) {
  if (rows <= 0 || out <= 0) return;
  const int64_t k4 = RoundUp(in, 4);
  // Reused between calls: a prefill's activations are a few megabytes.
  thread_local std::vector<int8_t> a;
  thread_local std::vector<float> t;
  a.resize(rows * k4);
  t.resize(rows);
  int8_t* const rows_a = a.data();
  float* const rows_t = t.data();
  at::parallel_for(0, rows, GrainFor(in), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      QuantizeRow(x + r * ldx, in, k4, rows_a + r * k4, rows_t + r);
    }
  });
  const Operands op{a.data(), t.data(), rows, k4, &panels, scale, out, bias, y, ldy};
  const int8_tiles::DotTile dot = TileFor(path);
  const int64_t count = (out + kInt8PanelWidth - 1) / kInt8PanelWidth;
  at::parallel_for(0, count, GrainFor(kInt8PanelWidth * k4 * rows),
                   [&](int64_t begin, int64_t end) { RunPanels(dot, op, begin, end); });
}

void Int8Gemm(const float* x, int64_t rows, int64_t ldx, const Int8Panels& panels,
              const float* scale, int64_t out, int64_t in, const float* bias, float* y,
              int64_t ldy) {
  Int8GemmOn(Int8GemmPath(), x, rows, ldx, panels, scale, out, in, bias, y, ldy);
}

}  // namespace attn::kernels
