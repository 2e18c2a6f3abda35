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
// On a GPU a step's few rows skip the host instead (model/mixers/
// gpu_experts.h): a kernel runs the chosen experts, which
// KernelWeightTable() names.
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
#include <optional>
#include <vector>

#include "model/layers/feed_forward.h"

namespace attn {

class MixtureOfExpertsImpl : public torch::nn::Module {
 public:
  // 1 <= top_k <= experts.
  MixtureOfExpertsImpl(int64_t d_model, int64_t hidden, int64_t experts, int64_t top_k);
  torch::Tensor forward(const torch::Tensor& x);

  // The router's choices for rows [n, d_model]: chosen [n, top_k] expert
  // ids (int64) and their gates [n, top_k] in the rows' type.
  struct Routing {
    torch::Tensor chosen, gates;
  };
  Routing Route(const torch::Tensor& rows);

  // The experts' weights for a kernel on their device: `pointers`, int64
  // [3, experts] there, holds each expert's gate, up and down weights'
  // addresses; `bf16`, whether they are bf16 (else float32). Nullopt unless
  // every weight is a contiguous float32 tensor that Dense multiplies as it
  // is (no bf16 or int8 copy), or every one is bf16, all on one device.
  // Made on the first call (a copy to a GPU) and kept while the weights
  // stay where they are, so that a CUDA graph's capture finds it made.
  struct KernelWeights {
    torch::Tensor pointers;
    bool bf16 = false;
  };
  std::optional<KernelWeights> KernelWeightTable();

  int64_t top_k() const { return top_k_; }
  int64_t experts() const { return static_cast<int64_t>(experts_.size()); }
  int64_t hidden() const { return hidden_; }

 private:
  int64_t top_k_, hidden_;
  torch::nn::Linear router_{nullptr};
  std::vector<FeedForward> experts_;
  std::vector<const void*> kernel_addresses_;  // what kernel_weights_ holds
  KernelWeights kernel_weights_;
};
TORCH_MODULE(MixtureOfExperts);

}  // namespace attn
