#include "model/kernels/bf16_gemm.h"

#include <ATen/Parallel.h>

#include <cstring>
#include <vector>

#include "model/kernels/bf16_tiles.h"
#include "model/kernels/cpu_features.h"
#include "model/kernels/kernel_common.h"

namespace attn::kernels {
namespace bf16_tiles {

// The portable path, compiled for baseline x86-64 (SSE2, 16 registers of 4
// floats): one row by one panel already takes 4 accumulators and 4 weight
// registers.
void RunGroupBaseline(const Operands& op, int64_t group, int64_t count) {
  RunGroupWith<1, 1>(op, group, count);
}

}  // namespace bf16_tiles

namespace {

int64_t Pairs(int64_t in) { return (in + 1) / 2; }

// Where W[o, k] sits in the layout (bf16_gemm.h).
int64_t LayoutIndex(int64_t o, int64_t k, int64_t in) {
  return o / kBf16GroupWidth * kBf16GroupWidth * 2 * Pairs(in) + k / 2 * 2 * kBf16GroupWidth +
         o % kBf16GroupWidth * 2 + k % 2;
}

int64_t Panels(int64_t out) { return (out + kBf16PanelWidth - 1) / kBf16PanelWidth; }
int64_t Groups(int64_t out) { return (out + kBf16GroupWidth - 1) / kBf16GroupWidth; }

bf16_tiles::RunGroup RunGroupFor(Bf16Path path) {
  switch (path) {
    case Bf16Path::kAvx512Bf16:
      return bf16_tiles::RunGroupAvx512Bf16;
    case Bf16Path::kAvx512:
      return bf16_tiles::RunGroupAvx512;
    case Bf16Path::kAvx2:
      return bf16_tiles::RunGroupAvx2;
    case Bf16Path::kBaseline:
      break;
  }
  return bf16_tiles::RunGroupBaseline;
}

// The rows of x rounded to bf16, zero-padded to whole pairs, into `rounded`
// (rows x ldr values, ldr even).
void RoundRows(const float* x, int64_t rows, int64_t ldx, int64_t in, int64_t ldr,
               std::vector<uint16_t>& rounded) {
  rounded.resize(rows * ldr);
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* row = rounded.data() + r * ldr;
    for (int64_t k = 0; k < in; ++k) row[k] = RoundToBf16(x[r * ldx + k]);
    if (in < ldr) row[in] = 0;
  }
}

}  // namespace

uint16_t RoundToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  // A NaN stays a NaN (quiet): the carry below could turn it into zero.
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  // Adding 0x7FFF plus the kept part's lowest bit carries into the kept
  // bits exactly when the dropped half is above one half, or equal to it
  // with an odd kept part: round to nearest, ties to even. An overflow
  // carries into the exponent and gives infinity, as it should.
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float Bf16ToFloat(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

Bf16Panels PackBf16Panels(const uint16_t* w, int64_t out, int64_t in) {
  Bf16Panels panels;
  panels.values.assign(Groups(out) * kBf16GroupWidth * 2 * Pairs(in), 0);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t k = 0; k < in; ++k) panels.values[LayoutIndex(o, k, in)] = w[o * in + k];
  }
  return panels;
}

void UnpackBf16Panels(const Bf16Panels& panels, int64_t out, int64_t in, uint16_t* w) {
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t k = 0; k < in; ++k) w[o * in + k] = panels.values[LayoutIndex(o, k, in)];
  }
}

bool CpuRuns(Bf16Path path) {
  switch (path) {
    case Bf16Path::kAvx512Bf16:
      return CpuHasAvx512Bf16();
    case Bf16Path::kAvx512:
      return CpuHasAvx512();
    case Bf16Path::kAvx2:
      return CpuHasAvx2();
    case Bf16Path::kBaseline:
      break;
  }
  return true;
}

Bf16Path Bf16GemmPath() {
  if (CpuRuns(Bf16Path::kAvx512Bf16)) return Bf16Path::kAvx512Bf16;
  if (CpuRuns(Bf16Path::kAvx512)) return Bf16Path::kAvx512;
  return CpuRuns(Bf16Path::kAvx2) ? Bf16Path::kAvx2 : Bf16Path::kBaseline;
}

bool Bf16GemmRunsEveryRowCount() {
  const Bf16Path path = Bf16GemmPath();
  return path == Bf16Path::kAvx512 || path == Bf16Path::kAvx512Bf16;
}

const char* Bf16PathName(Bf16Path path) {
  switch (path) {
    case Bf16Path::kAvx512Bf16:
      return "AVX-512 BF16";
    case Bf16Path::kAvx512:
      return "AVX-512";
    case Bf16Path::kAvx2:
      return "AVX2";
    case Bf16Path::kBaseline:
      break;
  }
  return "baseline";
}

void Bf16GemmOn(Bf16Path path, const float* x, int64_t rows, int64_t ldx, const Bf16Panels& panels,
                int64_t out, int64_t in, const float* bias, float* y, int64_t ldy) {
  if (rows <= 0 || out <= 0) return;
  // Per calling thread: a prefill's products reuse it instead of allocating.
  thread_local std::vector<uint16_t> rounded;
  const int64_t ldr = 2 * Pairs(in);
  RoundRows(x, rows, ldx, in, ldr, rounded);
  bf16_tiles::Operands op;
  op.x = rounded.data();
  op.rows = rows;
  op.ldx = ldr;
  op.w = panels.values.data();
  op.out = out;
  op.pairs = Pairs(in);
  op.bias = bias;
  op.y = y;
  op.ldy = ldy;
  const bf16_tiles::RunGroup run = RunGroupFor(path);
  constexpr int64_t kGroup = kBf16GroupWidth / kBf16PanelWidth;  // panels
  const int64_t panel_count = Panels(out);
  at::parallel_for(0, Groups(out), GrainFor(kBf16GroupWidth * ldr * rows),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t g = begin; g < end; ++g) {
                       run(op, g, std::min(kGroup, panel_count - g * kGroup));
                     }
                   });
}

void Bf16Gemm(const float* x, int64_t rows, int64_t ldx, const Bf16Panels& panels, int64_t out,
              int64_t in, const float* bias, float* y, int64_t ldy) {
  Bf16GemmOn(Bf16GemmPath(), x, rows, ldx, panels, out, in, bias, y, ldy);
}

}  // namespace attn::kernels
