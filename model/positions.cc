#include "model/positions.h"

#include <torch/torch.h>

#include <cmath>
#include <vector>

namespace attn {

torch::Tensor SinusoidalEmbedding(const torch::Tensor& positions, int64_t d_model) {
  TORCH_CHECK(d_model % 2 == 0, "sinusoidal positions need an even d_model, got ", d_model);
  auto opts = torch::TensorOptions().device(positions.device()).dtype(torch::kDouble);
  auto i = torch::arange(0, d_model, 2, opts);  // 2i
  auto inv_freq = torch::exp(-std::log(10000.0) * i / static_cast<double>(d_model));
  auto angles = positions.to(torch::kDouble).unsqueeze(-1) * inv_freq;  // [.., d/2]
  // Interleave: even channels sin, odd channels cos.
  auto pe = torch::stack({angles.sin(), angles.cos()}, -1).flatten(-2);
  return pe.to(torch::kFloat);
}

SinusoidalPositionsImpl::SinusoidalPositionsImpl(int64_t d_model, int64_t table_positions)
    : d_model_(d_model) {
  TORCH_CHECK(d_model % 2 == 0, "sinusoidal positions need an even d_model, got ", d_model);
  if (table_positions > 0) {
    table_ = SinusoidalEmbedding(torch::arange(table_positions, torch::kLong), d_model);
  }
}

torch::Tensor SinusoidalPositionsImpl::forward(const torch::Tensor& positions) const {
  const bool in_table = table_.defined() && positions.device() == table_.device() &&
                        !positions.is_floating_point() && positions.numel() > 0 &&
                        positions.min().item<int64_t>() >= 0 &&
                        positions.max().item<int64_t>() < table_.size(0);
  if (!in_table) return SinusoidalEmbedding(positions, d_model_);
  std::vector<int64_t> sizes = positions.sizes().vec();
  sizes.push_back(d_model_);
  return table_.index_select(0, positions.reshape(-1).to(torch::kLong)).view(sizes);
}

LearnedPositionsImpl::LearnedPositionsImpl(int64_t max_positions, int64_t d_model) {
  table_ = register_parameter("table", torch::randn({max_positions, d_model}) * 0.02);
}

torch::Tensor LearnedPositionsImpl::forward(const torch::Tensor& positions) const {
  TORCH_CHECK(positions.numel() == 0 || (positions.min().item<int64_t>() >= 0 &&
                                         positions.max().item<int64_t>() < table_.size(0)),
              "learned positions cover [0, ", table_.size(0), ")");
  return torch::nn::functional::embedding(positions.to(torch::kLong), table_);
}

}  // namespace attn
