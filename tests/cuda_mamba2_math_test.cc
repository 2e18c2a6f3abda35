// Mamba-2's elementwise GPU kernels' arithmetic (model/cuda/mamba2_math.h)
// on the CPU: every thread as the kernels run them (the gated norm's block
// sum taken whole) against the equations of model/mixers/mamba2.h in
// float64, the torch operations the kernels replace. The launches
// themselves run on a GPU (device_tests there, with and without the
// kernels).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>

#include "model/cuda/mamba2_math.h"
#include "tests/test_util.h"

namespace attn {
namespace {

float* Floats(torch::Tensor& t) { return t.data_ptr<float>(); }

void ExpectNear(const torch::Tensor& got, const torch::Tensor& want, const char* what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_LT(testing::MaxAbsDiff(got, want), 2e-6 * (1.0 + want.abs().max().item<double>())) << what;
}

// A step (one token: the new window is mostly the old one's) and a chunk
// longer than the window, from a projection whose xbc channels sit at an
// offset within wider rows, as the input projection's do.
TEST(CudaMamba2Math, ConvolutionFollowsTheCausalFilterAndKeepsTheWindow) {
  torch::manual_seed(4);
  const int64_t batch = 2, channels = 37, width = 4, held = width - 1, offset = 5, stride = 50;
  for (const int64_t time : {1, 6}) {
    auto projected = torch::randn({batch, time, stride}),
         window = torch::randn({batch, held, channels});
    auto weight = torch::randn({channels, width}), bias = torch::randn({channels});
    auto out = torch::full({batch, time, channels}, NAN);
    auto window_out = torch::full({batch, held, channels}, NAN);
    kernels::CausalConvArgs a;
    a.batch = batch, a.time = time, a.channels = channels, a.width = width, a.in_stride = stride;
    a.in = Floats(projected) + offset, a.window = Floats(window), a.weight = Floats(weight);
    a.bias = Floats(bias), a.out = Floats(out), a.window_out = Floats(window_out);
    for (int64_t unit = 0; unit < batch * (time + held); ++unit) {
      for (int64_t i = 0; i < channels; ++i) cuda::ConvChannel(a, unit, i);
    }
    // Mamba2Impl::Convolve in float64.
    const auto inputs =
        torch::cat({window, projected.narrow(2, offset, channels)}, 1).to(torch::kDouble);
    auto want = bias.to(torch::kDouble).expand({batch, time, channels}).clone();
    for (int64_t j = 0; j < width; ++j) {
      want += inputs.narrow(1, j, time) * weight.select(1, j).to(torch::kDouble);
    }
    ExpectNear(out, torch::silu(want), "out");
    ExpectNear(window_out, inputs.narrow(1, time, held), "window");
  }
}

TEST(CudaMamba2Math, GatedNormNormalisesEachGroup) {
  torch::manual_seed(5);
  const int64_t rows = 3, d = 48, groups = 2, z_stride = 60;
  auto y = torch::randn({rows, d}) * 2, z = torch::randn({rows, z_stride});
  auto gain = torch::randn({d});
  auto out = torch::full({rows, d}, NAN);
  cuda::GatedRmsNormArgs a;
  a.rows = rows, a.d = d, a.groups = groups, a.z_stride = z_stride, a.eps = 1e-5f;
  a.y = Floats(y), a.z = Floats(z), a.gain = Floats(gain), a.out = Floats(out);
  const int64_t size = d / groups;
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t g = 0; g < groups; ++g) {
      float squares = 0.f;
      for (int64_t i = g * size; i < (g + 1) * size; ++i) {
        const float value = cuda::GatedValue(a, row, i);
        squares += value * value;
      }
      for (int64_t i = g * size; i < (g + 1) * size; ++i) cuda::GatedNormWrite(a, row, i, squares);
    }
  }
  // Mamba2Impl::GatedNorm's operations in float64.
  const auto gated = (y.to(torch::kDouble) * torch::silu(z.narrow(1, 0, d).to(torch::kDouble)))
                         .view({rows, groups, size});
  const auto normed = gated * torch::rsqrt(gated.square().mean(-1, true) + 1e-5);
  ExpectNear(out, normed.view({rows, d}) * gain.to(torch::kDouble), "out");
}

}  // namespace
}  // namespace attn
