// RWKV-7's elementwise GPU kernels' arithmetic (model/cuda/rwkv7_math.h) on
// the CPU: every thread, warp and lane as the kernels run them, the lanes'
// parts summed in place of the warp's shuffles, against the equations of
// model/mixers/rwkv7.h in float64 (the torch operations the kernels
// replace), at a head size that is not a multiple of the warp. The
// launches themselves run on a GPU (device_tests there, with and without
// the kernels).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/cuda/rwkv7_math.h"
#include "tests/test_util.h"

namespace attn {
namespace {

using cuda::kWarp;

constexpr int64_t kHeads = 3, kHeadDim = 40, kChannels = kHeads * kHeadDim;

torch::Tensor Uniform(std::vector<int64_t> shape, double low, double high) {
  return torch::rand(shape) * (high - low) + low;
}

float* Floats(torch::Tensor& t) { return t.data_ptr<float>(); }

void ExpectNear(const torch::Tensor& got, const torch::Tensor& want, const char* what) {
  EXPECT_LT(testing::MaxAbsDiff(got, want), 2e-6 * (1.0 + want.abs().max().item<double>())) << what;
}

TEST(CudaRwkv7Math, MixesFollowTheTokenShift) {
  torch::manual_seed(1);
  const int64_t batch = 2, time = 3, count = 6;
  auto x = torch::randn({batch, time, kChannels}), shift = torch::randn({batch, kChannels});
  std::vector<torch::Tensor> mus;
  for (int64_t m = 0; m < count; ++m) mus.push_back(torch::rand({kChannels}));
  auto out = torch::full({count, batch, time, kChannels}, NAN);
  kernels::TokenShiftMixArgs a;
  a.batch = batch, a.time = time, a.channels = kChannels, a.count = count;
  a.x = Floats(x), a.shift = Floats(shift), a.out = Floats(out);
  cuda::Rwkv7Mixes mu;
  for (int64_t m = 0; m < count; ++m) mu.mixes[m] = Floats(mus[m]);
  for (int64_t token = 0; token < batch * time; ++token) {
    for (int64_t i = 0; i < kChannels; ++i) cuda::MixChannel(a, mu, token, i);
  }
  // out_m = x + (x_previous - x) mu_m, the row's shift before its first token.
  const auto x64 = x.to(torch::kDouble);
  const auto previous =
      torch::cat({shift.to(torch::kDouble).unsqueeze(1), x64.narrow(1, 0, time - 1)}, 1);
  for (int64_t m = 0; m < count; ++m) {
    ExpectNear(out[m], x64 + (previous - x64) * mus[m].to(torch::kDouble), "a mix");
  }
}

// The activations' float64 reference: the torch operations of
// Rwkv7Impl::Activate, with the first layer's values mixed in.
struct Activated {
  torch::Tensor w, v, iclr, kk, k;
};
Activated ActivateInFloat64(const std::array<torch::Tensor, 4>& w_v_iclr_k,
                            const torch::Tensor& first, const torch::Tensor& gate,
                            const std::array<torch::Tensor, 5>& biases_and_scales, double scale) {
  auto d = [](const torch::Tensor& t) { return t.to(torch::kDouble); };
  const auto& [w, v, iclr, k] = w_v_iclr_k;
  const auto& [decay_bias, value_bias, iclr_bias, kappa, alpha] = biases_and_scales;
  Activated out;
  out.w = torch::exp(torch::sigmoid(d(decay_bias) + d(w)) * -scale);
  out.v = d(v) + (d(first) - d(v)) * torch::sigmoid(d(value_bias) + d(gate));
  out.iclr = torch::sigmoid(d(iclr_bias) + d(iclr));
  const auto scaled = (d(k) * d(kappa)).view({-1, kHeads, kHeadDim});
  out.kk = (scaled / scaled.norm(2, -1, true).clamp_min(1e-12)).view({-1, kChannels});
  out.k = d(k) * (1.0 + (out.iclr - 1.0) * d(alpha));
  return out;
}

TEST(CudaRwkv7Math, ActivationsFollowTheEquations) {
  torch::manual_seed(2);
  const int64_t tokens = 5;
  auto w = torch::randn({tokens, kChannels}), v = torch::randn({tokens, kChannels});
  auto iclr = torch::randn({tokens, kChannels}), k = torch::randn({tokens, kChannels});
  auto first = torch::randn({tokens, kChannels}), gate = torch::randn({tokens, kChannels});
  std::array<torch::Tensor, 5> params = {Uniform({kChannels}, -6, 0), torch::randn({kChannels}),
                                         torch::randn({kChannels}), Uniform({kChannels}, 0.5, 1),
                                         Uniform({kChannels}, 0.8, 1.2)};
  const double scale = 0.60653065971263342;
  const Activated want = ActivateInFloat64({w, v, iclr, k}, first, gate, params, scale);
  auto kk = torch::full({tokens, kChannels}, NAN);
  kernels::Rwkv7ActivationsArgs a;
  a.tokens = tokens, a.heads = kHeads, a.head_dim = kHeadDim;
  a.w = Floats(w), a.v = Floats(v), a.iclr = Floats(iclr), a.k = Floats(k), a.kk = Floats(kk);
  a.first = Floats(first), a.gate = Floats(gate);
  a.decay_bias = Floats(params[0]), a.value_bias = Floats(params[1]);
  a.iclr_bias = Floats(params[2]), a.key_norm_scale = Floats(params[3]);
  a.key_iclr_scale = Floats(params[4]), a.decay_scale = static_cast<float>(scale);
  // A block per token, a warp per head: the lanes' squares summed, then
  // each lane normalises its own channels.
  for (int64_t token = 0; token < tokens; ++token) {
    for (int64_t h = 0; h < kHeads; ++h) {
      const int64_t head0 = token * kChannels + h * kHeadDim;
      float squares = 0.f;
      for (int lane = 0; lane < kWarp; ++lane) {
        for (int64_t j = lane; j < kHeadDim; j += kWarp) {
          squares += cuda::ActivateChannel(a, head0 + j);
        }
      }
      for (int64_t j = 0; j < kHeadDim; ++j) cuda::NormalizeKey(a, head0 + j, squares);
    }
  }
  ExpectNear(w, want.w, "w");
  ExpectNear(v, want.v, "v");
  ExpectNear(iclr, want.iclr, "iclr");
  ExpectNear(kk, want.kk, "kk");
  ExpectNear(k, want.k, "k");
}

TEST(CudaRwkv7Math, HeadOutputNormalisesEachHeadAndAddsTheBonus) {
  torch::manual_seed(3);
  const int64_t batch = 2, time = 5, tail = 2;
  auto o = torch::randn({batch, tail, kChannels}) * 3 + 1,
       r = torch::randn({batch, tail, kChannels});
  auto k = torch::randn({batch, time, kChannels}), v = torch::randn({batch, time, kChannels});
  auto gain = torch::randn({kChannels}), bias = torch::randn({kChannels});
  auto bonus = torch::randn({kChannels});
  auto out = torch::full({batch, tail, kChannels}, NAN);
  cuda::Rwkv7HeadOutputArgs a;
  a.batch = batch, a.time = time, a.tail = tail, a.heads = kHeads, a.head_dim = kHeadDim;
  a.eps = 64e-5f;
  a.o = Floats(o), a.r = Floats(r), a.k = Floats(k), a.v = Floats(v);
  a.gain = Floats(gain), a.bias = Floats(bias), a.bonus = Floats(bonus), a.out = Floats(out);
  for (int64_t unit = 0; unit < batch * tail * kHeads; ++unit) {
    cuda::HeadSums sums;
    for (int lane = 0; lane < kWarp; ++lane) {
      const cuda::HeadSums part = cuda::HeadOutputSums(a, unit, lane);
      sums.o += part.o;
      sums.bonus += part.bonus;
    }
    const float mean = sums.o / static_cast<float>(kHeadDim);
    float squares = 0.f;
    for (int lane = 0; lane < kWarp; ++lane)
      squares += cuda::HeadOutputSquares(a, unit, lane, mean);
    for (int lane = 0; lane < kWarp; ++lane) {
      cuda::HeadOutputWrite(a, unit, lane, mean, squares, sums.bonus);
    }
  }
  // Rwkv7Impl::OutputByOps in float64: the last `tail` tokens' k and v.
  auto d = [](const torch::Tensor& t) { return t.to(torch::kDouble); };
  const auto heads = d(o).view({batch, tail, kHeads, kHeadDim});
  const auto centered = heads - heads.mean(-1, true);
  const auto normed =
      (centered * torch::rsqrt(centered.square().mean(-1, true) + 64e-5)).view({batch, tail, -1});
  const auto k_tail = d(k).narrow(1, time - tail, tail), v_tail = d(v).narrow(1, time - tail, tail);
  const auto bonus_sum =
      (d(r) * k_tail * d(bonus)).view({batch, tail, kHeads, kHeadDim}).sum(-1, true);
  const auto want =
      normed * d(gain) + d(bias) +
      (bonus_sum * v_tail.view({batch, tail, kHeads, kHeadDim})).view({batch, tail, -1});
  ExpectNear(out, want, "out");
}

}  // namespace
}  // namespace attn
