// Position encodings.
//
//   sinusoidal (Vaswani et al. 2017):
//     PE(p, 2i) = sin(p / 10000^(2i/d)),  PE(p, 2i+1) = cos(p / 10000^(2i/d))
//   learned: a trained table E[p] for p < max_positions.
//
// Both map integer positions [..] to embeddings [.., d_model]; a model adds
// them to its token embeddings.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

namespace attn {

// The sinusoidal embedding of `positions` (any integer or float tensor).
// d_model must be even.
torch::Tensor SinusoidalEmbedding(const torch::Tensor& positions, int64_t d_model);

// SinusoidalEmbedding with positions 0..table_positions-1 computed once,
// in float on the CPU: a 256-token prefill otherwise evaluates 256 x d_model
// sines and cosines in double (perf: about 1% of a 512-token prefill, on
// both threads). Positions past the table, or on another device, are
// computed as before; the results are identical either way. The table is
// not a buffer: it is not saved with the model and does not move with it.
class SinusoidalPositionsImpl : public torch::nn::Module {
 public:
  explicit SinusoidalPositionsImpl(int64_t d_model, int64_t table_positions = 0);
  torch::Tensor forward(const torch::Tensor& positions) const;

 private:
  int64_t d_model_;
  torch::Tensor table_;  // [table_positions, d_model] float on the CPU, or undefined
};
TORCH_MODULE(SinusoidalPositions);

class LearnedPositionsImpl : public torch::nn::Module {
 public:
  LearnedPositionsImpl(int64_t max_positions, int64_t d_model);
  // positions must lie in [0, max_positions).
  torch::Tensor forward(const torch::Tensor& positions) const;
  const torch::Tensor& table() const { return table_; }

 private:
  torch::Tensor table_;  // [max_positions, d_model]
};
TORCH_MODULE(LearnedPositions);

}  // namespace attn
