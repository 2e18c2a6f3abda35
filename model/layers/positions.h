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

// SinusoidalEmbedding from two tables built once (in double, stored as
// float on the CPU): the embeddings of positions r < R and of the block
// starts q R, q < R. A position q R + r combines them by the angle-addition
// formulas, sin(a + b) = sin a cos b + cos a sin b and cos(a + b) = cos a
// cos b - sin a sin b: a handful of multiply-adds per channel, the same at
// every position below R^2. Computed with tensor ops at every call, the
// embedding cost a tenth of a batch-1 decode step; from the tables it costs
// a tenth of that (docs/benchmarks-log.md). A table of the first positions alone
// would make a step cost more past its end; these keep the cost flat with
// the context. The
// result is within 2e-7 of SinusoidalEmbedding's (float rounding of the
// tables' entries). Other devices and dtypes, negative positions and those
// from R^2 on are computed as SinusoidalEmbedding does. The tables are not
// buffers: they are not saved with the model and do not move with it.
class SinusoidalPositionsImpl : public torch::nn::Module {
 public:
  // table_positions = R; 0 computes every embedding.
  explicit SinusoidalPositionsImpl(int64_t d_model, int64_t table_positions = 0);
  torch::Tensor forward(const torch::Tensor& positions) const;

 private:
  int64_t d_model_;
  torch::Tensor near_;    // [R, d_model]: positions 0..R-1, or undefined
  torch::Tensor blocks_;  // [R, d_model]: positions 0, R, 2R, ..
};
TORCH_MODULE(SinusoidalPositions);

class LearnedPositionsImpl : public torch::nn::Module {
 public:
  LearnedPositionsImpl(int64_t max_positions, int64_t d_model);
  // positions must lie in [0, max_positions).
  torch::Tensor forward(const torch::Tensor& positions) const;
  // forward() without its check, which reads the positions on the host:
  // positions past the table take its last row. For a caller that checked
  // the positions it reads (a CUDA graph's replay, whose padding rows run
  // on past the context and whose outputs no one reads).
  torch::Tensor Clamped(const torch::Tensor& positions) const;
  const torch::Tensor& table() const { return table_; }

 private:
  torch::Tensor table_;  // [max_positions, d_model]
};
TORCH_MODULE(LearnedPositions);

}  // namespace attn
