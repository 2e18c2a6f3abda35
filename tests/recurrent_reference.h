// RWKV-4 and Mamba-2 (model/mixers/rwkv4.h, mamba2.h) as literal float64
// loops over their papers' equations, token by token, and the language
// models built of them: the yardstick for the two blocks' fused and
// op-by-op paths and for imported checkpoints. RWKV-4's WKV is the plain
// ratio of sums over every earlier token (O(T^2)), not the stable running
// form the block uses, so the two agree only if that form is right. Written
// for clarity, not speed; they read only the weights, never the modules'
// code.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "model/lm/config.h"
#include "tests/rwkv7_reference.h"

namespace attn::reference {

// Parameters by name, as float64 tensors.
using Params = std::map<std::string, torch::Tensor>;
Params ParamsOf(const torch::nn::Module& module, const std::string& prefix = "");

// One RWKV-4 block of a sequence: call Next for each token in order.
class Rwkv4Block {
 public:
  Rwkv4Block(const Params& p, bool first, bool halve);
  Vector Next(const Vector& x);

 private:
  Vector Vec(const std::string& name) const;
  Matrix Mat(const std::string& name) const;
  Params p_;
  bool first_, halve_;
  Matrix keys_, values_;  // every earlier token's k and v
  Vector att_shift_, ffn_shift_;
};

// One Mamba-2 block of a sequence.
class Mamba2Block {
 public:
  Mamba2Block(const Params& p, int64_t heads, const Mamba2Sizes& sizes);
  Vector Next(const Vector& x);

 private:
  Params p_;
  int64_t heads_;
  Mamba2Sizes sizes_;
  Matrix inputs_;              // every earlier token's xbc, before the convolution
  std::vector<Matrix> state_;  // [H][P][N]
};

// The logits [T][V] of `tokens` under a model of `config` (rwkv4 or mamba2)
// whose parameters (CausalLm's names) are `params`.
Matrix LmLogits(const LmConfig& config, const Params& params, const std::vector<int64_t>& tokens);

}  // namespace attn::reference
