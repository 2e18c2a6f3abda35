// The skeleton every whole block shares (model/mixers/whole_block.h): how a
// call reaches its rows' state. A probe block records what its Run is
// given; the GPU's in-place step (RowAccess::kGpuStep) is asked for on the
// CPU here, since only its wiring, not its kernel, is under test (the
// kernels' arithmetic on pool rows: cuda_step_math_test.cc; RWKV-7 and
// Mamba-2 through it on a GPU: device_tests).
#include "model/mixers/whole_block.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "tests/test_util.h"

namespace attn {
namespace {

using testing::Int64s;

// A block of two state tensors: a "matrix" [rows, 3] that a kernel would
// update in place, and a "shift" [rows, d] that is always gathered. Its Run
// adds 1 to each row's matrix (through the ids where it is given the pool's
// whole tensor) and sets the shift to x's last token; it passes x through.
class ProbeBlock : public WholeBlockMixer {
 public:
  explicit ProbeBlock(MixerOptions options, bool gpu_steps)
      : WholeBlockMixer(std::move(options)), gpu_steps_(gpu_steps) {}

  MixerState initial_state(int64_t rows, torch::Device device) const override {
    MixerState state;
    state.length = torch::zeros({rows}, torch::TensorOptions(torch::kLong).device(device));
    state.tensors = {torch::zeros({rows, 3}, torch::TensorOptions().device(device)),
                     torch::zeros({rows, options_.d_model}, torch::TensorOptions().device(device))};
    return state;
  }
  int64_t max_context() const override { return -1; }
  int64_t state_bytes_per_sequence(int64_t /*context*/) const override { return 0; }

  struct Seen {
    bool fused = false, gpu_step = false, matrix_is_pool = false;
    std::vector<int64_t> ids, device_ids;
  };
  std::vector<Seen> seen;
  torch::Tensor pool;  // the state's matrix tensor, to recognise it

 protected:
  torch::Tensor Run(const torch::Tensor& x, BlockRows& rows, int64_t keep,
                    LayerCarry& /*carry*/) override {
    Seen s;
    s.fused = rows.fused();
    s.gpu_step = rows.gpu_step();
    s.matrix_is_pool = rows.tensors[0].is_same(pool);
    if (rows.ids != nullptr) s.ids.assign(rows.ids, rows.ids + x.size(0));
    if (rows.device_ids.defined()) s.device_ids = Int64s(rows.device_ids);
    seen.push_back(s);
    if (s.matrix_is_pool) {
      for (int64_t b = 0; b < x.size(0); ++b) rows.tensors[0][rows.ids[b]].add_(1.0);
    } else {
      rows.tensors[0] = rows.tensors[0] + 1.0;
    }
    rows.tensors[1] = x.select(1, x.size(1) - 1).clone();
    return x.narrow(1, x.size(1) - keep, keep);
  }
  bool InPlaceWhenFused(size_t tensor) const override { return tensor == 0; }
  bool StepsPoolRowsOnGpu(const torch::Tensor& /*x*/, const MixerState& /*state*/) const override {
    return gpu_steps_;
  }

 private:
  bool gpu_steps_;
};

MixerOptions ProbeOptions(bool fused_kernels) {
  MixerOptions options;
  options.kind = MixerKind::kRwkv7;
  options.d_model = 4;
  options.fused_kernels = fused_kernels;
  return options;
}

// Rows 3 and 0 of a pool of 5 stepped once; every other row as it was.
void ExpectRowsStepped(const MixerState& state, const torch::Tensor& x) {
  const std::vector<float> expected_matrix = {1, 0, 0, 1, 0};
  for (int64_t row = 0; row < 5; ++row) {
    EXPECT_EQ(state.tensors[0][row][0].item<float>(), expected_matrix[row]) << "row " << row;
  }
  EXPECT_TRUE(torch::equal(state.tensors[1][3], x[0]));
  EXPECT_TRUE(torch::equal(state.tensors[1][0], x[1]));
  EXPECT_EQ(state.tensors[1][1].abs().sum().item<float>(), 0.f);
  EXPECT_EQ(Int64s(state.length), (std::vector<int64_t>{1, 0, 0, 1, 0}));
}

TEST(WholeBlock, AGpuStepIsGivenThePoolsMatricesWholeWithTheRowsIdsOnTheDevice) {
  ProbeBlock block(ProbeOptions(/*fused_kernels=*/false), /*gpu_steps=*/true);
  MixerState state = block.initial_state(5, torch::kCPU);
  block.pool = state.tensors[0];
  const torch::Tensor x = torch::randn({2, 4});
  block.step(x, state, torch::tensor({3, 0}));
  ASSERT_EQ(block.seen.size(), 1u);
  const ProbeBlock::Seen& seen = block.seen[0];
  EXPECT_TRUE(seen.gpu_step);
  EXPECT_FALSE(seen.fused);
  EXPECT_TRUE(seen.matrix_is_pool);
  EXPECT_EQ(seen.ids, (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(seen.device_ids, (std::vector<int64_t>{3, 0}));
  ExpectRowsStepped(state, x);
}

TEST(WholeBlock, OnlyAOneTokenStepWithItsOutputRunsOnThePoolsRows) {
  ProbeBlock block(ProbeOptions(/*fused_kernels=*/false), /*gpu_steps=*/true);
  MixerState state = block.initial_state(5, torch::kCPU);
  block.pool = state.tensors[0];
  // A prefill of two tokens, and one token whose output is not wanted:
  // gathered, as the operations' path needs.
  block.prefill(torch::randn({2, 2, 4}), state, torch::tensor({3, 0}));
  block.prefill_last(torch::randn({2, 1, 4}), state, torch::tensor({3, 0}), 0);
  ASSERT_EQ(block.seen.size(), 2u);
  for (const ProbeBlock::Seen& seen : block.seen) {
    EXPECT_FALSE(seen.gpu_step);
    EXPECT_FALSE(seen.matrix_is_pool);
    EXPECT_TRUE(seen.ids.empty());
    EXPECT_TRUE(seen.device_ids.empty());
  }
  EXPECT_EQ(Int64s(state.length), (std::vector<int64_t>{3, 0, 0, 3, 0}));
  EXPECT_EQ(state.tensors[0][3][0].item<float>(), 2.f);  // scattered back
}

TEST(WholeBlock, TheCpusFusedKernelsComeFirstAndGatheringIsTheDefault) {
  const torch::Tensor x = torch::randn({2, 4});
  for (const bool fused_kernels : {true, false}) {
    // With the CPU's fused kernels a GPU step is not asked for even where
    // the block would take it; without them, a block that would not (a
    // kind without the kernel, or a build without kernels) gathers.
    ProbeBlock block(ProbeOptions(fused_kernels), /*gpu_steps=*/fused_kernels);
    MixerState state = block.initial_state(5, torch::kCPU);
    block.pool = state.tensors[0];
    block.step(x, state, torch::tensor({3, 0}));
    ASSERT_EQ(block.seen.size(), 1u);
    const ProbeBlock::Seen& seen = block.seen[0];
    EXPECT_EQ(seen.fused, fused_kernels);
    EXPECT_FALSE(seen.gpu_step);
    EXPECT_EQ(seen.matrix_is_pool, fused_kernels);
    EXPECT_TRUE(seen.device_ids.empty());
    ExpectRowsStepped(state, x);
  }
}

}  // namespace
}  // namespace attn
