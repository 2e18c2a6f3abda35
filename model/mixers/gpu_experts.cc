#include "model/mixers/gpu_experts.h"

#include <torch/torch.h>

#include <optional>
#include <string>

#include "model/cuda/state_kernels.h"
#include "model/mixers/block_helpers.h"

namespace attn {

namespace {

// The experts' weights for the kernel where it applies to x, else nullopt.
std::optional<MixtureOfExpertsImpl::KernelWeights> KernelWeightsFor(MixtureOfExpertsImpl& moe,
                                                                    const torch::Tensor& x) {
  if (!CudaStepApplies({&x})) return std::nullopt;
  const int64_t rows = x.numel() / x.size(-1);
  if (rows * moe.top_k() > cuda::kMaxExpertChoices) return std::nullopt;
  std::optional<MixtureOfExpertsImpl::KernelWeights> weights = moe.KernelWeightTable();
  if (weights.has_value() && weights->pointers.device() != x.device()) return std::nullopt;
  return weights;
}

}  // namespace

bool ExpertsKernelApplies(MixtureOfExpertsImpl& moe, const torch::Tensor& x) {
  return KernelWeightsFor(moe, x).has_value();
}

torch::Tensor RunExperts(MixtureOfExpertsImpl& moe, const torch::Tensor& x) {
  const std::optional<MixtureOfExpertsImpl::KernelWeights> weights = KernelWeightsFor(moe, x);
  if (!weights.has_value()) return moe.forward(x);
  const int64_t d = x.size(-1), n = x.numel() / d, k = moe.top_k();
  const torch::Tensor rows = x.reshape({n, d}).contiguous();
  const MixtureOfExpertsImpl::Routing routing = moe.Route(rows);
  const torch::Tensor chosen = routing.chosen.contiguous();
  const auto table = [&](int64_t i) {
    return reinterpret_cast<const void* const*>(weights->pointers[i].data_ptr<int64_t>());
  };
  cuda::ExpertsArgs args;
  args.rows = n;
  args.top_k = k;
  args.experts = moe.experts();
  args.d = d;
  args.bf16 = weights->bf16;
  args.x = rows.data_ptr<float>();
  args.chosen = chosen.data_ptr<int64_t>();
  args.gate = table(0);
  args.up = table(1);
  args.down = table(2);
  args.hidden = moe.hidden();
  const torch::Tensor act = torch::empty({n * k, args.hidden}, rows.options());
  const torch::Tensor out = torch::empty({n * k, d}, rows.options());
  args.act = act.data_ptr<float>();
  args.out = out.data_ptr<float>();
  RunOnGpu(x.device(), "mixture of experts",
           [&](void* stream) { return cuda::Experts(args, stream); });
  return (out.view({n, k, d}) * routing.gates.unsqueeze(-1)).sum(1).view(x.sizes());
}

}  // namespace attn
