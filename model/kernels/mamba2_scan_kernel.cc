// Mamba-2's state update over a chunk of tokens (kernels.h: Mamba2Scan),
// token by token and in the chunked form of the SSD paper's section 6.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/kernels/head_tasks.h"
#include "model/kernels/kernel_common.h"
#include "model/kernels/kernels.h"
#include "model/kernels/register_tiles.h"

namespace attn::kernels {
namespace {

// Chunks at least this long take the chunked form; shorter ones (a decode
// step, a speculation round's check of a few drafts) scan token by token,
// where the blocks' setup outweighs their products: at mamba2-130m's heads
// on a Zen 1 (attn-kernel-bench --mamba2), 8 tokens took 0.51 ms chunked
// against 0.39 token by token, 16 tokens 0.50 against 0.56.
constexpr int64_t kChunkedFrom = 16;
constexpr int64_t kBlock = 64;

// softplus(x) = log(1 + e^x), as torch computes it: x itself above 20.
inline float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// The distance between two tokens' B (and C) in a.b (a.c).
inline int64_t BcStride(const Mamba2ScanArgs& a) {
  return a.xbc_stride > 0 ? a.xbc_stride : a.groups * a.state_size;
}

// Where one head's inputs and state sit: the strides of Mamba2ScanArgs
// resolved once.
struct HeadView {
  int64_t p, n, x_stride, bc_stride, dt_stride, group;
  float rate, skip;
  float* s;
  HeadView(const Mamba2ScanArgs& a, int64_t row, int64_t h)
      : p(a.head_dim),
        n(a.state_size),
        x_stride(a.xbc_stride > 0 ? a.xbc_stride : a.heads * a.head_dim),
        bc_stride(BcStride(a)),
        dt_stride(a.dt_stride > 0 ? a.dt_stride : a.heads),
        group(h / (a.heads / a.groups)),
        rate(-std::exp(a.a_log[h])),
        skip(a.d[h]),
        s(a.s + (SlotOf(a.slots, row) * a.heads + h) * a.head_dim * a.state_size) {}
  // Token i's step dt (after softplus when the bias is given).
  float Dt(const Mamba2ScanArgs& a, int64_t token, int64_t h) const {
    const float raw = a.dt[token * dt_stride + h];
    return a.dt_bias != nullptr ? Softplus(raw + a.dt_bias[h]) : raw;
  }
};

// One head of one row over every token, the recurrence as written.
ATTN_HOT void Mamba2OneHead(const Mamba2ScanArgs& a, int64_t row, int64_t h) {
  const HeadView v(a, row, h);
  const int64_t p = v.p, n = v.n, outputs = a.time - a.first_output;
  for (int64_t t = 0; t < a.time; ++t) {
    const int64_t token = row * a.time + t;
    const float dt = v.Dt(a, token, h);
    const float decay = std::exp(dt * v.rate);
    const float* x = a.x + token * v.x_stride + h * p;
    const float* b = a.b + token * v.bc_stride + v.group * n;
    const float* c = a.c + token * v.bc_stride + v.group * n;
    const bool emit = t >= a.first_output;
    float* out = emit ? a.out + ((row * outputs + t - a.first_output) * a.heads + h) * p : nullptr;
    for (int64_t i = 0; i < p; ++i) {
      float* state = v.s + i * n;
      const float input = dt * x[i];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) state[j] = state[j] * decay + input * b[j];
      if (emit) out[i] = Dot(state, c, n) + v.skip * x[i];
    }
  }
}

// What every head of a group shares, per block of each row: the gram
// C_i . B_j, B^T and C, computed and laid out once per group rather than
// once per head (every released Mamba-2 and Granite 4.0-H has a single group:
// 24 and 48 heads had computed the same products).
struct GroupBlocks {
  int64_t block, blocks, padded_block, gram_rows, n, groups;
  int64_t block_floats;  // floats per block
  // Not cleared: GroupBlock writes every entry that is read.
  std::unique_ptr<float[]> data;
  GroupBlocks(const Mamba2ScanArgs& a, int64_t block_size)
      : block(std::min(block_size, a.time)),
        blocks((a.time + block - 1) / block),
        padded_block(RoundUp(block, 16)),
        // A tile of rows may start at any token of the block.
        gram_rows(block + kTileRows),
        n(a.state_size),
        groups(a.groups),
        block_floats((gram_rows + n) * padded_block + gram_rows * n),
        data(new float[a.batch * a.groups * blocks * block_floats]) {}
  // [gram_rows][padded_block]: C_i . B_j for j up to each tile's last row,
  // then [n][padded_block]: B^T (BT), then [gram_rows][n]: C of query i (C).
  float* Gram(int64_t row, int64_t group, int64_t index) const {
    return data.get() + ((row * groups + group) * blocks + index) * block_floats;
  }
  float* BT(float* gram) const { return gram + gram_rows * padded_block; }
  float* C(float* gram) const { return BT(gram) + n * padded_block; }
};

// Block `index` of row `row`, group `group`: B^T, C and the gram of the
// rows that get an output (from first_output on), in tiles of kTileRows
// queries whose scores past the tile's last query are neither computed nor
// read.
template <bool kNarrow>
ATTN_HOT void GroupBlock(const Mamba2ScanArgs& a, const GroupBlocks& g, int64_t row, int64_t group,
                         int64_t index) {
  const int64_t n = g.n, ld = g.padded_block, first = index * g.block;
  const int64_t len = std::min(g.block, a.time - first);
  const int64_t skip = std::clamp<int64_t>(a.first_output - first, 0, len);
  const int64_t bc_stride = BcStride(a);
  float* gram = g.Gram(row, group, index);
  float* bt = g.BT(gram);
  float* c = g.C(gram);
  for (int64_t t = 0; t < len; ++t) {
    const int64_t at = (row * a.time + first + t) * bc_stride + group * n;
    for (int64_t j = 0; j < n; ++j) bt[j * ld + t] = a.b[at + j];
    if (t >= skip) std::copy_n(a.c + at, n, c + t * n);
  }
  // The tiles read whole vectors of B^T and whole tiles of C's rows: a
  // short block's padding too.
  for (int64_t j = 0; j < n; ++j) std::fill(bt + j * ld + len, bt + (j + 1) * ld, 0.0f);
  std::fill(c + len * n, c + g.gram_rows * n, 0.0f);
  for (int64_t i0 = skip; i0 < len; i0 += kTileRows) {
    const int64_t width = RoundUp(std::min(len, i0 + kTileRows), 16);
    for (int64_t r = 0; r < kTileRows; ++r) std::fill_n(gram + (i0 + r) * ld, width, 0.0f);
    MulAddRows<kNarrow>(c + i0 * n, n, bt, ld, n, gram + i0 * ld, ld, width);
  }
}

// Where one head's block lives while Mamba2ChunkedOneHead works on it, padded
// to whole vectors and whole tiles of rows so that every product is whole
// register tiles. Not cleared between heads: padding holds zeros from the
// first resize, or sums that land only in rows and columns nobody reads.
struct SsdScratch {
  int64_t p, padded_p, n, block, padded_block;
  float *bt, *x, *scores, *y, *st, *dt;
  SsdScratch(std::vector<float>& scratch, int64_t head_dim, int64_t state_size, int64_t block_size)
      : p(head_dim),
        padded_p(RoundUp(head_dim, 16)),
        n(state_size),
        block(block_size),
        padded_block(RoundUp(block_size, 16)) {
    // A tile of rows may start at any token of the block, or any state row.
    const int64_t token_rows = block + kTileRows, state_rows = n + kTileRows;
    const int64_t bt_size = state_rows * padded_block;
    const int64_t x_size = padded_block * padded_p, scores_size = token_rows * padded_block;
    const int64_t y_size = token_rows * padded_p, st_size = state_rows * padded_p;
    scratch.resize(bt_size + x_size + scores_size + y_size + st_size + block);
    bt = scratch.data();       // [state_rows][padded_block]: B^T weighted
    x = bt + bt_size;          // [padded_block][padded_p]
    scores = x + x_size;       // [token_rows][padded_block]: (C_i . B_j) weighted
    y = scores + scores_size;  // [token_rows][padded_p]
    st = y + y_size;           // [state_rows][padded_p]: S^T
    dt = st + st_size;         // [block]: each token's step, then its weight
  }
};

// The queries i0 .. i0 + kTileRows - 1 (up to len) of a block whose prefix
// sums of a_t = dt_t A are cum (inclusive) and whose gram and C are `gram`
// and `c` (GroupBlocks):
//   scores[i][j] = (C_i . B_j) e^{cum_i - cum_j} dt_j    (j <= i, else 0)
//   y_i = e^{cum_i} S^T C_i + sum_j scores[i][j] x_j
template <bool kNarrow>
ATTN_INLINE void SsdQueryTile(const SsdScratch& m, const float* gram, const float* c,
                              const double* cum, int64_t i0, int64_t len) {
  const int64_t last = std::min(len, i0 + kTileRows);
  float* y = m.y + i0 * m.padded_p;
  std::fill_n(y, kTileRows * m.padded_p, 0.0f);
  MulAddRows<kNarrow>(c + i0 * m.n, m.n, m.st, m.padded_p, m.n, y, m.padded_p, m.padded_p);
  for (int64_t i = i0; i < last; ++i) {
    const float* products = gram + i * m.padded_block;
    float* row = m.scores + i * m.padded_block;
    // Differences of double prefix sums: no cancellation at float precision.
#pragma omp simd
    for (int64_t j = 0; j <= i; ++j)
      row[j] = products[j] * FastExp(static_cast<float>(cum[i] - cum[j])) * m.dt[j];
    std::fill(row + i + 1, row + last, 0.0f);
    const float from_start = FastExp(static_cast<float>(cum[i]));
    float* yi = m.y + i * m.padded_p;
    for (int64_t col = 0; col < m.p; ++col) yi[col] *= from_start;
  }
  // Rows of scores past `last` hold whatever they held: their sums land in
  // rows of y nobody reads.
  MulAddRows<kNarrow>(m.scores + i0 * m.padded_block, m.padded_block, m.x, m.padded_p, last, y,
                      m.padded_p, m.padded_p);
}

// S^T <- e^{cum_last} S^T + sum_j e^{cum_last - cum_j} dt_j B_j x_j^T, with
// the block's shared B^T as `bt`.
template <bool kNarrow>
ATTN_INLINE void SsdStateUpdate(const SsdScratch& m, const float* bt, const double* cum,
                                int64_t len) {
  const double total = cum[len - 1];
  for (int64_t j = 0; j < len; ++j) m.dt[j] *= FastExp(static_cast<float>(total - cum[j]));
  for (int64_t r = 0; r < m.n; ++r) {
    const float* shared = bt + r * m.padded_block;
    float* row = m.bt + r * m.padded_block;
    for (int64_t j = 0; j < len; ++j) row[j] = shared[j] * m.dt[j];
  }
  const float decay = FastExp(static_cast<float>(total));
  for (int64_t r = 0; r < m.n; ++r) {
    float* row = m.st + r * m.padded_p;
    for (int64_t col = 0; col < m.p; ++col) row[col] *= decay;
  }
  for (int64_t r0 = 0; r0 < m.n; r0 += kTileRows) {
    MulAddRows<kNarrow>(m.bt + r0 * m.padded_block, m.padded_block, m.x, m.padded_p, len,
                        m.st + r0 * m.padded_p, m.padded_p, m.padded_p);
  }
}

// One head of one row through all of a.time tokens in blocks: the sums of
// Mamba2OneHead regrouped as small matrix products on register tiles
// (model/mixers/mamba2.h writes out the regrouping), with the group's
// products from `g`. Token by token, each token read and rewrote all of S
// (P x N floats) for 2 multiply-adds per element; here S stays in
// registers for a tile's whole block of tokens.
template <int64_t kP, bool kNarrow>
ATTN_HOT void Mamba2ChunkedOneHead(const Mamba2ScanArgs& a, const GroupBlocks& g, int64_t row,
                                   int64_t h, std::vector<float>& scratch) {
  const HeadView v(a, row, h);
  const int64_t p = kP > 0 ? kP : v.p, n = v.n, outputs = a.time - a.first_output;
  const SsdScratch m(scratch, p, n, g.block);
  for (int64_t i = 0; i < p; ++i) {
    for (int64_t j = 0; j < n; ++j) m.st[j * m.padded_p + i] = v.s[i * n + j];
  }
  std::vector<double> cum(m.block);
  for (int64_t index = 0; index < g.blocks; ++index) {
    const int64_t first = index * m.block, len = std::min(m.block, a.time - first);
    const int64_t skip = std::clamp<int64_t>(a.first_output - first, 0, len);
    double sum = 0.0;
    for (int64_t t = 0; t < len; ++t) {
      const int64_t token = row * a.time + first + t;
      m.dt[t] = v.Dt(a, token, h);
      sum += static_cast<double>(m.dt[t] * v.rate);
      cum[t] = sum;
      std::copy_n(a.x + token * v.x_stride + h * p, p, m.x + t * m.padded_p);
    }
    float* const gram = g.Gram(row, v.group, index);
    for (int64_t i0 = skip; i0 < len; i0 += kTileRows) {
      SsdQueryTile<kNarrow>(m, gram, g.C(gram), cum.data(), i0, len);
      for (int64_t i = i0; i < std::min(len, i0 + kTileRows); ++i) {
        const float* y = m.y + i * m.padded_p;
        const float* x = m.x + i * m.padded_p;
        float* out = a.out + ((row * outputs + first + i - a.first_output) * a.heads + h) * p;
        for (int64_t col = 0; col < p; ++col) out[col] = y[col] + v.skip * x[col];
      }
    }
    SsdStateUpdate<kNarrow>(m, g.BT(gram), cum.data(), len);
  }
  for (int64_t i = 0; i < p; ++i) {
    for (int64_t j = 0; j < n; ++j) v.s[i * n + j] = m.st[j * m.padded_p + i];
  }
}

// The chunked form: each group's products, then each head.
void Mamba2ScanChunked(const Mamba2ScanArgs& a, int64_t block, AttentionTiles tiles) {
  GroupBlocks g(a, block);
  const bool narrow = tiles == AttentionTiles::kNarrow;
  at::parallel_for(0, a.batch * a.groups * g.blocks, GrainFor(g.block * g.block * a.state_size),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t task = begin; task < end; ++task) {
                       const int64_t index = task % g.blocks, rest = task / g.blocks;
                       if (narrow) {
                         GroupBlock<true>(a, g, rest / a.groups, rest % a.groups, index);
                       } else {
                         GroupBlock<false>(a, g, rest / a.groups, rest % a.groups, index);
                       }
                     }
                   });
  ForEachRowAndHead(
      a, a.time * a.head_dim * a.state_size * 4, tiles,
      [&](auto head_size, auto tiling, int64_t b, int64_t h, std::vector<float>& scratch) {
        Mamba2ChunkedOneHead<head_size(), tiling()>(a, g, b, h, scratch);
      });
}

}  // namespace

void Mamba2Scan(const Mamba2ScanArgs& a, AttentionTiles tiles) {
  const int64_t block = a.block >= 0 ? a.block : (a.time >= kChunkedFrom ? kBlock : 0);
  if (block > 0) return Mamba2ScanChunked(a, block, tiles);
  const int64_t work = a.time * a.head_dim * a.state_size * 4;
  at::parallel_for(0, a.batch * a.heads, GrainFor(work), [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) Mamba2OneHead(a, task / a.heads, task % a.heads);
  });
}

}  // namespace attn::kernels
