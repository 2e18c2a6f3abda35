// The Mamba-2 and RWKV-7 step kernels' arithmetic (model/cuda/step_math.h)
// on the CPU, on the step's own arrays and on rows of a state pool updated
// in place, the inputs laid out as each caller passes them: every block,
// warp channel and lane as the kernels run them, the lanes' parts summed in
// place of the warp's shuffles, against the recurrences of
// model/mixers/mamba2.h and rwkv7.h in float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "model/cuda/step_math.h"
#include "tests/cuda_math_test_util.h"

namespace attn {
namespace {

using cuda::kWarp;
using cuda_test::ExpectClose;
using cuda_test::Random;
using cuda_test::Unwritten;

// Where a step's state lives: its own [batch, ...] arrays (s_in read,
// s_out written), or, with slots, rows of a pool updated in place.
struct StepState {
  std::vector<int64_t> slots;  // empty: rows 0..batch-1
  std::vector<float> before;   // the state the step starts from
  std::vector<float> after;    // written by the step (the pool itself when in place)
  // Where row b's matrix of `floats` floats starts.
  int64_t Matrix(int64_t row, int64_t floats) const {
    return (slots.empty() ? row : slots[row]) * floats;
  }
};

// Row b's state at rows 0..batch-1, or at slots {3, 0} of a pool of 4 rows
// whose other rows the step must leave as they were.
StepState MakeStepState(bool in_pool, int64_t batch, int64_t floats, std::mt19937& gen) {
  StepState state;
  if (in_pool) {
    state.slots = {3, 0};
    EXPECT_EQ(batch, 2);
    state.before = Random(4 * floats, -1, 1, gen);
    state.after = state.before;
  } else {
    state.before = Random(batch * floats, -1, 1, gen);
    state.after = Unwritten(state.before.size());
  }
  return state;
}

// The pool's rows no slot names, untouched (without slots, every row is
// the step's).
void ExpectOtherRowsKept(const StepState& state, int64_t floats) {
  if (state.slots.empty()) return;
  for (size_t at = 0; at < state.after.size(); ++at) {
    const int64_t row = static_cast<int64_t>(at) / floats;
    if (std::count(state.slots.begin(), state.slots.end(), row) == 0) {
      ASSERT_EQ(state.after[at], state.before[at]) << "pool row " << row << " changed at " << at;
    }
  }
}

class CudaStepMathRows : public ::testing::TestWithParam<bool> {};

// Mamba-2's inputs as the engine's decode step passes them: x, B and C
// slices of the convolution's rows, dt the projection's raw value.
struct Mamba2Projected {
  std::vector<float> xbc, dt;
};
Mamba2Projected ProjectedRows(const std::vector<float>& x, const std::vector<float>& b,
                              const std::vector<float>& c, const std::vector<float>& raw_dt,
                              int64_t batch) {
  const int64_t xs = x.size() / batch, bcs = b.size() / batch, heads = raw_dt.size() / batch;
  const int64_t stride = xs + 2 * bcs + 3;
  Mamba2Projected out{std::vector<float>(batch * stride, NAN),
                      std::vector<float>(batch * (heads + 2), NAN)};
  for (int64_t row = 0; row < batch; ++row) {
    std::copy_n(x.begin() + row * xs, xs, out.xbc.begin() + row * stride);
    std::copy_n(b.begin() + row * bcs, bcs, out.xbc.begin() + row * stride + xs);
    std::copy_n(c.begin() + row * bcs, bcs, out.xbc.begin() + row * stride + xs + bcs);
    std::copy_n(raw_dt.begin() + row * heads, heads, out.dt.begin() + row * (heads + 2));
  }
  return out;
}

TEST_P(CudaStepMathRows, Mamba2LanesSumToTheRecurrence) {
  const int64_t batch = 2, heads = 6, groups = 2, p = 5, n = 40, floats = heads * p * n;
  std::mt19937 gen(11);
  const auto x = Random(batch * heads * p, -1, 1, gen), b = Random(batch * groups * n, -1, 1, gen);
  const auto c = Random(batch * groups * n, -1, 1, gen), raw = Random(batch * heads, -4, 3, gen);
  const auto a_log = Random(heads, -1, 2, gen), d = Random(heads, -1, 1, gen);
  const auto dt_bias = Random(heads, -2, 2, gen);
  // On the pool's rows, the engine's layout (softplus in the kernel); on
  // the step's own arrays, packed inputs and dt after softplus.
  std::vector<float> dt(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) dt[i] = std::log1p(std::exp(raw[i] + dt_bias[i % heads]));
  const Mamba2Projected projected = ProjectedRows(x, b, c, raw, batch);
  StepState state = MakeStepState(GetParam(), batch, floats, gen);
  auto y = Unwritten(x.size());
  cuda::Mamba2StepArgs a;
  a.batch = batch, a.heads = heads, a.head_dim = p, a.state_size = n, a.groups = groups;
  a.x = x.data(), a.b = b.data(), a.c = c.data(), a.dt = dt.data(), a.a_log = a_log.data();
  a.d = d.data(), a.y = y.data();
  if (GetParam()) {
    a.x_stride = a.bc_stride = static_cast<int64_t>(projected.xbc.size()) / batch;
    a.x = projected.xbc.data(), a.b = a.x + heads * p, a.c = a.b + groups * n;
    a.dt = projected.dt.data(), a.dt_stride = heads + 2, a.dt_bias = dt_bias.data();
  }
  a.slots = state.slots.empty() ? nullptr : state.slots.data();
  a.s_in = GetParam() ? state.after.data() : state.before.data(), a.s_out = state.after.data();
  for (int64_t block = 0; block < batch * heads; ++block) {
    for (int64_t channel = 0; channel < p; ++channel) {
      float sum = 0.f;
      for (int lane = 0; lane < kWarp; ++lane) sum += cuda::Mamba2LanePart(a, block, channel, lane);
      cuda::Mamba2Output(a, block, channel, sum);
    }
  }
  // S = exp(dt A) S + dt x B^T, y = S C + D x, A = -exp(a_log), B and C
  // those of the head's group.
  for (int64_t row = 0; row < batch; ++row) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / (heads / groups);
      const double step =
          std::log1p(std::exp(static_cast<double>(raw[row * heads + h]) + dt_bias[h]));
      const double decay = std::exp(-std::exp(a_log[h]) * step);
      for (int64_t i = 0; i < p; ++i) {
        const int64_t channel = (row * heads + h) * p + i;
        double out = d[h] * static_cast<double>(x[channel]);
        for (int64_t j = 0; j < n; ++j) {
          const int64_t at = state.Matrix(row, floats) + (h * p + i) * n + j;
          const int64_t bc = (row * groups + g) * n + j;
          const double s = state.before[at] * decay + step * x[channel] * b[bc];
          ExpectClose(state.after[at], s, "S", at);
          out += s * c[bc];
        }
        ExpectClose(y[channel], out, "y", channel);
      }
    }
  }
  ExpectOtherRowsKept(state, floats);
}

TEST_P(CudaStepMathRows, Rwkv7LanesSumToTheDeltaRule) {
  const int64_t batch = 2, heads = 3, n = 40, channels = heads * n, floats = heads * n * n;
  std::mt19937 gen(13);
  const auto r = Random(batch * channels, -1, 1, gen), w = Random(batch * channels, 0.55f, 1, gen);
  const auto k = Random(batch * channels, -1, 1, gen), v = Random(batch * channels, -1, 1, gen);
  const auto kk = Random(batch * channels, -0.3f, 0.3f, gen);
  const auto iclr = Random(batch * channels, 0, 1, gen);
  StepState state = MakeStepState(GetParam(), batch, floats, gen);
  auto o = Unwritten(r.size());
  cuda::Rwkv7StepArgs a;
  a.batch = batch, a.heads = heads, a.head_dim = n;
  a.r = r.data(), a.w = w.data(), a.k = k.data(), a.v = v.data(), a.kk = kk.data();
  a.iclr = iclr.data(), a.o = o.data();
  a.slots = state.slots.empty() ? nullptr : state.slots.data();
  a.s_in = GetParam() ? state.after.data() : state.before.data(), a.s_out = state.after.data();
  for (int64_t block = 0; block < batch * heads; ++block) {
    for (int64_t i = 0; i < n; ++i) {
      float removed = 0.f, out = 0.f;
      for (int lane = 0; lane < kWarp; ++lane) removed += cuda::Rwkv7RemovedPart(a, block, i, lane);
      for (int lane = 0; lane < kWarp; ++lane) {
        out += cuda::Rwkv7UpdatePart(a, block, i, lane, removed);
      }
      o[block * n + i] = out;
    }
  }
  // Per head, S = S (diag(w) - kk^T (iclr * kk)) + v^T k and o = S r, S's
  // rows the value channels.
  for (int64_t block = 0; block < batch * heads; ++block) {
    const int64_t head0 = block * n;
    const int64_t matrix = state.Matrix(block / heads, floats) + (block % heads) * n * n;
    for (int64_t i = 0; i < n; ++i) {
      double removed = 0;
      for (int64_t j = 0; j < n; ++j) {
        removed += static_cast<double>(state.before[matrix + i * n + j]) * kk[head0 + j];
      }
      double out = 0;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t at = matrix + i * n + j, c = head0 + j;
        const double s = static_cast<double>(state.before[at]) * w[c] - removed * kk[c] * iclr[c] +
                         static_cast<double>(v[head0 + i]) * k[c];
        ExpectClose(state.after[at], s, "S", at);
        out += s * r[c];
      }
      ExpectClose(o[head0 + i], out, "o", head0 + i);
    }
  }
  ExpectOtherRowsKept(state, floats);
}

// false: the step's own arrays; true: rows of a pool, in place.
INSTANTIATE_TEST_SUITE_P(OwnArraysAndPoolRows, CudaStepMathRows, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "PoolRowsInPlace" : "OwnArrays";
                         });

}  // namespace
}  // namespace attn
