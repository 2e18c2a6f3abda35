// Head reshaping and input projections shared by the attention modules'
// implementations (not a public header of the library).
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <vector>

namespace attn {

// [B, T, H * Dh] -> [B, H, T, Dh].
inline torch::Tensor SplitHeads(const torch::Tensor& x, int64_t heads) {
  const auto b = x.size(0), t = x.size(1);
  return x.view({b, t, heads, x.size(2) / heads}).transpose(1, 2);
}

// [B, H, T, Dh] -> [B, T, H * Dh].
inline torch::Tensor MergeHeads(const torch::Tensor& x) {
  const auto b = x.size(0), h = x.size(1), t = x.size(2), dh = x.size(3);
  return x.transpose(1, 2).reshape({b, t, h * dh});
}

// q, k, v as [B, H, T, Dh] from one d -> 3d projection whose weight rows are
// [W_q; W_k; W_v]. Self-attention (query, key and value the same tensor)
// takes one matrix multiplication.
std::vector<torch::Tensor> ProjectToHeads(torch::nn::Linear in_proj, const torch::Tensor& query,
                                          const torch::Tensor& key, const torch::Tensor& value,
                                          int64_t heads);

}  // namespace attn
