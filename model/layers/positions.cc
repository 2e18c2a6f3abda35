#include "model/layers/positions.h"

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
    const auto near = torch::arange(table_positions, torch::kLong);
    near_ = SinusoidalEmbedding(near, d_model).contiguous();
    blocks_ = SinusoidalEmbedding(near * table_positions, d_model).contiguous();
  }
}

torch::Tensor SinusoidalPositionsImpl::forward(const torch::Tensor& positions) const {
  const bool tabled =
      near_.defined() && positions.device().is_cpu() && positions.scalar_type() == torch::kLong;
  if (!tabled) return SinusoidalEmbedding(positions, d_model_);
  const auto flat = positions.reshape(-1).contiguous();
  const int64_t* p = flat.data_ptr<int64_t>();
  const int64_t rows = near_.size(0), count = flat.numel();
  for (int64_t i = 0; i < count; ++i) {
    if (p[i] < 0 || p[i] >= rows * rows) return SinusoidalEmbedding(positions, d_model_);
  }
  std::vector<int64_t> sizes = positions.sizes().vec();
  sizes.push_back(d_model_);
  auto out = torch::empty(sizes, torch::kFloat);
  float* y = out.data_ptr<float>();
  const float* near = near_.data_ptr<float>();
  const float* blocks = blocks_.data_ptr<float>();
  for (int64_t i = 0; i < count; ++i, y += d_model_) {
    // position = q rows + r: the angle of block q plus the angle of r.
    const float* b = blocks + (p[i] / rows) * d_model_;
    const float* n = near + (p[i] % rows) * d_model_;
    for (int64_t c = 0; c < d_model_; c += 2) {
      y[c] = b[c] * n[c + 1] + b[c + 1] * n[c];      // sin(B + N)
      y[c + 1] = b[c + 1] * n[c + 1] - b[c] * n[c];  // cos(B + N)
    }
  }
  return out;
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

torch::Tensor LearnedPositionsImpl::Clamped(const torch::Tensor& positions) const {
  const auto rows = positions.to(torch::kLong).clamp(0, table_.size(0) - 1);
  return torch::nn::functional::embedding(rows, table_);
}

}  // namespace attn
