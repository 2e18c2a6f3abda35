#include "model/layers/mixture_of_experts.h"

#include <torch/torch.h>

#include "model/layers/dense.h"

namespace attn {

MixtureOfExpertsImpl::MixtureOfExpertsImpl(int64_t d_model, int64_t hidden, int64_t experts,
                                           int64_t top_k)
    : top_k_(top_k) {
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

torch::Tensor MixtureOfExpertsImpl::forward(const torch::Tensor& x) {
  const int64_t d = x.size(-1), n = x.numel() / d;
  const auto rows = x.reshape({n, d});
  auto [top, chosen] = Dense(rows, router_).topk(top_k_, /*dim=*/1);
  const auto gates = torch::softmax(top, 1).to(x.scalar_type());
  // Which rows each expert serves, and with which gate: grouped on the CPU,
  // where the choices are few (n * top_k).
  const auto ids = chosen.to(torch::kCPU).contiguous();
  const int64_t* id = ids.data_ptr<int64_t>();
  std::vector<std::vector<int64_t>> served(experts_.size());
  for (int64_t i = 0; i < n * top_k_; ++i) served[id[i]].push_back(i);
  auto out = torch::zeros_like(rows);
  const auto flat_gates = gates.reshape({n * top_k_, 1});
  for (size_t e = 0; e < experts_.size(); ++e) {
    if (served[e].empty()) continue;
    const auto picks = torch::tensor(served[e], torch::kLong).to(x.device());
    const auto row_ids = torch::floor_divide(picks, top_k_);
    const auto y = experts_[e]->forward(rows.index_select(0, row_ids));
    out.index_add_(0, row_ids, y * flat_gates.index_select(0, picks));
  }
  return out.view(x.sizes());
}

}  // namespace attn
