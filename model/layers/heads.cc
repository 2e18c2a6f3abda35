#include "model/layers/heads.h"

#include <torch/torch.h>

#include "model/layers/dense.h"

namespace attn {

std::vector<torch::Tensor> ProjectToHeads(torch::nn::Linear in_proj, const torch::Tensor& query,
                                          const torch::Tensor& key, const torch::Tensor& value,
                                          int64_t heads) {
  namespace F = torch::nn::functional;
  if (query.is_same(key) && key.is_same(value)) {
    auto qkv = Dense(query, in_proj).chunk(3, -1);
    return {SplitHeads(qkv[0], heads), SplitHeads(qkv[1], heads), SplitHeads(qkv[2], heads)};
  }
  const auto& w = in_proj->weight;
  const auto& b = in_proj->bias;
  const int64_t d = w.size(0) / 3;
  auto q = F::linear(query, w.narrow(0, 0, d), b.narrow(0, 0, d));
  auto k = F::linear(key, w.narrow(0, d, d), b.narrow(0, d, d));
  auto v = F::linear(value, w.narrow(0, 2 * d, d), b.narrow(0, 2 * d, d));
  return {SplitHeads(q, heads), SplitHeads(k, heads), SplitHeads(v, heads)};
}

}  // namespace attn
