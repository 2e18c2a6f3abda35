// The experts kernel's arithmetic (model/cuda/experts_math.h) on the CPU:
// every expert's block, warp row and lane as cuda::Experts runs them, the
// lanes' parts summed in place of the warp's shuffles, against
// MixtureOfExperts itself in float64 (model/layers/mixture_of_experts.h).
// Widths are not multiples of the warp, experts take more choices than a
// pass holds, and one expert is never chosen, so the indexing is what is
// checked; the launch itself runs on a GPU (device_tests there).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "model/cuda/experts_math.h"
#include "model/layers/dense.h"
#include "model/layers/mixture_of_experts.h"
#include "model/mixers/gpu_experts.h"
#include "tests/test_util.h"

namespace attn {
namespace {

using cuda::kExpertChoicesAtOnce;
using cuda::kWarp;

constexpr int64_t kD = 40, kHidden = 72, kExperts = 5, kTopK = 2, kRows = 30;

// One expert's matrix as the kernel reads it: float32 values, or bf16 bits.
struct Matrix {
  std::vector<float> floats;
  std::vector<uint16_t> bf16;
  const void* data(bool as_bf16) const {
    return as_bf16 ? static_cast<const void*>(bf16.data()) : floats.data();
  }
};

Matrix MatrixOf(const torch::Tensor& weight) {
  const torch::Tensor f = weight.to(torch::kFloat).contiguous();
  const torch::Tensor b = weight.to(torch::kBFloat16).contiguous();
  Matrix m;
  m.floats.assign(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
  m.bf16.resize(b.numel());
  std::memcpy(m.bf16.data(), b.data_ptr(), b.numel() * sizeof(uint16_t));
  return m;
}

// One stage of cuda::Experts for every expert's block: each row of the
// expert's matrices, kExpertChoicesAtOnce choices a pass, 32 lanes.
void RunStage(const cuda::ExpertsArgs& a, bool hidden) {
  std::vector<int64_t> choices(a.rows * a.top_k);
  const int64_t rows = hidden ? a.hidden : a.d, width = hidden ? a.d : a.hidden;
  for (int64_t expert = 0; expert < a.experts; ++expert) {
    const int count = static_cast<int>(cuda::ExpertChoices(a, expert, choices.data()));
    for (int64_t row = 0; row < rows; ++row) {
      for (int first = 0; first < count; first += kExpertChoicesAtOnce) {
        const int batch = std::min(count - first, kExpertChoicesAtOnce);
        int64_t inputs[kExpertChoicesAtOnce];
        cuda::ExpertInputs(a, choices.data(), first, batch, hidden, inputs);
        float sums[kExpertChoicesAtOnce] = {}, ups[kExpertChoicesAtOnce] = {};
        for (int lane = 0; lane < kWarp; ++lane) {
          float parts[kExpertChoicesAtOnce], up_parts[kExpertChoicesAtOnce];
          const void* w = hidden ? a.gate[expert] : a.down[expert];
          cuda::ExpertLaneDots(w, a.bf16, row, width, hidden ? a.x : a.act, inputs, batch, lane,
                               parts);
          if (hidden) {
            cuda::ExpertLaneDots(a.up[expert], a.bf16, row, width, a.x, inputs, batch, lane,
                                 up_parts);
          }
          for (int c = 0; c < batch; ++c) {
            sums[c] += parts[c];
            if (hidden) ups[c] += up_parts[c];
          }
        }
        for (int c = 0; c < batch; ++c) {
          const int64_t choice = choices[first + c];
          if (hidden) {
            a.act[choice * a.hidden + row] = cuda::ExpertActivation(sums[c], ups[c]);
          } else {
            a.out[choice * a.d + row] = sums[c];
          }
        }
      }
    }
  }
}

// A mixture whose last expert the router never picks, its weights drawn
// at fan-in scale; bf16: every weight rounded to bf16 first, so that the
// float64 reference multiplies the values the kernel reads.
MixtureOfExperts Mixture(bool bf16) {
  torch::manual_seed(5);
  MixtureOfExperts moe(kD, kHidden, kExperts, kTopK);
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : moe->parameters()) {
    p.normal_(0.0, 1.0 / std::sqrt(static_cast<double>(p.size(1))));
    if (bf16) p.copy_(p.to(torch::kBFloat16).to(torch::kFloat));
  }
  // Inputs are positive (Inputs()): this expert's logit is -sum(x) < -4.
  moe->named_parameters()["router.weight"][kExperts - 1].fill_(-1.0);
  moe->to(torch::kDouble);
  return moe;
}

// Rows of positive inputs, in (0.1, 1.1).
torch::Tensor Inputs(int64_t rows) { return torch::rand({rows, kD}, torch::kDouble) + 0.1; }

void ExpectKernelsEqualTheMixture(bool bf16) {
  MixtureOfExperts moe = Mixture(bf16);
  torch::NoGradGuard no_grad;
  const torch::Tensor x = Inputs(kRows);
  const torch::Tensor expected = moe->forward(x);
  const MixtureOfExpertsImpl::Routing routing = moe->Route(x);
  const torch::Tensor chosen = routing.chosen.contiguous();
  ASSERT_FALSE(chosen.eq(kExperts - 1).any().item<bool>());
  ASSERT_GT(torch::bincount(chosen.flatten()).max().item<int64_t>(), kExpertChoicesAtOnce)
      << "an expert takes more choices than one pass";
  std::vector<Matrix> gate, up, down;
  std::vector<const void*> gate_at, up_at, down_at;
  auto params = moe->named_parameters();
  for (int64_t e = 0; e < kExperts; ++e) {
    const std::string name = "experts." + std::to_string(e) + ".";
    gate.push_back(MatrixOf(params[name + "gate.weight"]));
    up.push_back(MatrixOf(params[name + "up.weight"]));
    down.push_back(MatrixOf(params[name + "down.weight"]));
  }
  for (int64_t e = 0; e < kExperts; ++e) {
    gate_at.push_back(gate[e].data(bf16));
    up_at.push_back(up[e].data(bf16));
    down_at.push_back(down[e].data(bf16));
  }
  const torch::Tensor x32 = x.to(torch::kFloat).contiguous();
  std::vector<float> act(kRows * kTopK * kHidden),
      out(kRows * kTopK * kD, std::numeric_limits<float>::quiet_NaN());
  cuda::ExpertsArgs a;
  a.rows = kRows;
  a.top_k = kTopK;
  a.experts = kExperts;
  a.d = kD;
  a.hidden = kHidden;
  a.bf16 = bf16;
  a.x = x32.data_ptr<float>();
  a.chosen = chosen.data_ptr<int64_t>();
  a.gate = gate_at.data();
  a.up = up_at.data();
  a.down = down_at.data();
  a.act = act.data();
  a.out = out.data();
  RunStage(a, /*hidden=*/true);
  RunStage(a, /*hidden=*/false);
  const torch::Tensor per_choice =
      torch::from_blob(out.data(), {kRows, kTopK, kD}, torch::kFloat).to(torch::kDouble);
  const torch::Tensor got = (per_choice * routing.gates.unsqueeze(-1)).sum(1);
  EXPECT_LT(testing::MaxAbsDiff(got, expected), 2e-5);
  EXPECT_GT(expected.abs().max().item<double>(), 0.1);
}

TEST(CudaExpertsMath, ChosenExpertsGiveTheMixtureInFloat32) {
  ExpectKernelsEqualTheMixture(/*bf16=*/false);
}

TEST(CudaExpertsMath, Bf16WeightsAreWidenedExactly) { ExpectKernelsEqualTheMixture(/*bf16=*/true); }

// A CPU mixture keeps the host's grouping: no kernel, the same numbers.
TEST(CudaExpertsMath, TheCpuGroupsRowsOnTheHost) {
  MixtureOfExperts moe = Mixture(false);
  moe->to(torch::kFloat);
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({3, 1, kD});
  EXPECT_FALSE(ExpertsKernelApplies(*moe, x));
  EXPECT_TRUE(torch::equal(RunExperts(*moe, x), moe->forward(x)));
}

// The address of every expert's `matrix` ("gate", "up" or "down") weight.
std::vector<int64_t> Addresses(MixtureOfExperts& moe, const std::string& matrix) {
  auto params = moe->named_parameters();
  std::vector<int64_t> addresses;
  for (int64_t e = 0; e < kExperts; ++e) {
    const torch::Tensor& w = params["experts." + std::to_string(e) + "." + matrix + ".weight"];
    addresses.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(w.data_ptr())));
  }
  return addresses;
}

// The kernel finds each expert's matrices by address: the table's row 0
// holds the gates', 1 the ups', 2 the downs'; bf16 where every weight is;
// none where a weight has a copy that Dense would multiply instead.
TEST(CudaExpertsMath, TheWeightTableNamesEveryExpertsMatrices) {
  MixtureOfExperts moe = Mixture(false);
  moe->to(torch::kFloat);
  for (const bool bf16 : {false, true}) {
    if (bf16) moe->to(torch::kBFloat16);
    std::optional<MixtureOfExpertsImpl::KernelWeights> table = moe->KernelWeightTable();
    ASSERT_TRUE(table.has_value());
    EXPECT_EQ(table->bf16, bf16);
    ASSERT_EQ(table->pointers.sizes(), (std::vector<int64_t>{3, kExperts}));
    const char* matrices[] = {"gate", "up", "down"};
    for (int64_t i = 0; i < 3; ++i) {
      EXPECT_EQ(testing::Int64s(table->pointers[i]), Addresses(moe, matrices[i])) << matrices[i];
    }
    EXPECT_TRUE(moe->KernelWeightTable()->pointers.is_same(table->pointers))
        << "made again although the weights stayed";
  }
  moe->to(torch::kFloat);
  ASSERT_TRUE(moe->KernelWeightTable().has_value());
  QuantizeWeightInt8(moe->named_parameters()["experts.3.down.weight"]);
  EXPECT_FALSE(moe->KernelWeightTable().has_value());
  MixtureOfExperts other = Mixture(false);
  other->to(torch::kFloat);
  QuantizeWeightBf16(other->named_parameters()["experts.0.gate.weight"], Bf16Product::kLibTorch);
  EXPECT_FALSE(other->KernelWeightTable().has_value());
}

}  // namespace
}  // namespace attn
