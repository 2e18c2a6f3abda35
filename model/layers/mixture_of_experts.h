// A sparse mixture of SwiGLU experts (Shazeer et al. 2017; top-k routing as
// Granite 4.0-H and Mixtral route), x [..., d_model] -> [..., d_model]:
//
//   r = W_router x                          r [E] logits, one per expert
//   S = the top_k experts by r
//   g_e = softmax_{e in S}(r_e)             the gates, summing to one over S
//   MoE(x) = sum_{e in S} g_e FF_e(x)       FF_e a SwiGLU feed-forward
//                                           (feed_forward.h) of width hidden
//
// Each token runs only its top_k experts: the rows are grouped by expert on
// the CPU and each chosen expert multiplies its rows at once, so a decode
// step of B rows costs at most B * top_k experts' products, whatever E is.
// The experts are ordinary feed-forwards (children "experts.N.{gate, up,
// down}", the router "router"), so int8 weights and packed products apply
// to them as to any projection.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "model/layers/feed_forward.h"

namespace attn {

class MixtureOfExpertsImpl : public torch::nn::Module {
 public:
  // 1 <= top_k <= experts.
  MixtureOfExpertsImpl(int64_t d_model, int64_t hidden, int64_t experts, int64_t top_k);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int64_t top_k_;
  torch::nn::Linear router_{nullptr};
  std::vector<FeedForward> experts_;
};
TORCH_MODULE(MixtureOfExperts);

}  // namespace attn
