#include "model/layers/mixture_of_experts.h"

#include <torch/torch.h>

#include <cstdint>

#include "model/layers/dense.h"

namespace attn {

MixtureOfExpertsImpl::MixtureOfExpertsImpl(int64_t d_model, int64_t hidden, int64_t experts,
                                           int64_t top_k)
    : top_k_(top_k), hidden_(hidden) {
  TORCH_CHECK(experts >= 1 && top_k >= 1 && top_k <= experts,
              "mixture of experts: top_k must be in [1, experts], got ", top_k, " of ", experts);
  router_ = register_module(
      "router", torch::nn::Linear(torch::nn::LinearOptions(d_model, experts).bias(false)));
  auto list = register_module("experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < experts; ++e) {
    experts_.push_back(FeedForward(d_model, hidden, FeedForwardKind::kSwiGlu));
    list->push_back(experts_.back());
  }
}

MixtureOfExpertsImpl::Routing MixtureOfExpertsImpl::Route(const torch::Tensor& rows) {
  auto [top, chosen] = Dense(rows, router_).topk(top_k_, /*dim=*/1);
  return {chosen, torch::softmax(top, 1).to(rows.scalar_type())};
}

torch::Tensor MixtureOfExpertsImpl::forward(const torch::Tensor& x) {
  const int64_t d = x.size(-1), n = x.numel() / d;
  const auto rows = x.reshape({n, d});
  const Routing routing = Route(rows);
  // Which rows each expert serves, and with which gate: grouped on the CPU,
  // where the choices are few (n * top_k).
  const auto ids = routing.chosen.to(torch::kCPU).contiguous();
  const int64_t* id = ids.data_ptr<int64_t>();
  std::vector<std::vector<int64_t>> served(experts_.size());
  for (int64_t i = 0; i < n * top_k_; ++i) served[id[i]].push_back(i);
  auto out = torch::zeros_like(rows);
  const auto flat_gates = routing.gates.reshape({n * top_k_, 1});
  for (size_t e = 0; e < experts_.size(); ++e) {
    if (served[e].empty()) continue;
    const auto picks = torch::tensor(served[e], torch::kLong).to(x.device());
    const auto row_ids = torch::floor_divide(picks, top_k_);
    const auto y = experts_[e]->forward(rows.index_select(0, row_ids));
    out.index_add_(0, row_ids, y * flat_gates.index_select(0, picks));
  }
  return out.view(x.sizes());
}

std::optional<MixtureOfExpertsImpl::KernelWeights> MixtureOfExpertsImpl::KernelWeightTable() {
  std::vector<const void*> addresses;
  const torch::Tensor& first = experts_.front()->up()->weight;
  const bool bf16 = first.scalar_type() == torch::kBFloat16;
  for (const auto& expert : experts_) {
    for (const torch::nn::Linear* layer : {&expert->gate(), &expert->up(), &expert->down()}) {
      const torch::Tensor& w = (*layer)->weight;
      const bool usable =
          bf16 ? w.scalar_type() == torch::kBFloat16
               : w.scalar_type() == torch::kFloat && !HasBf16Copy(w) && !HasInt8Copy(w);
      if (!usable || !w.is_contiguous() || w.device() != first.device()) {
        return std::nullopt;
      }
      addresses.push_back(w.data_ptr());
    }
  }
  if (addresses != kernel_addresses_) {
    // [experts, 3] as gathered, stored [3, experts]: gate, up, down rows.
    std::vector<int64_t> values(addresses.size());
    for (size_t i = 0; i < addresses.size(); ++i) {
      values[i] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(addresses[i]));
    }
    kernel_weights_.pointers = torch::tensor(values, torch::kLong)
                                   .view({experts(), 3})
                                   .t()
                                   .contiguous()
                                   .to(first.device());
    kernel_weights_.bf16 = bf16;
    kernel_addresses_ = std::move(addresses);
  }
  return kernel_weights_;
}

}  // namespace attn
