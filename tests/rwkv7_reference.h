// RWKV-7 (model/mixers/rwkv7.h) as literal float64 loops over the equations
// of the RWKV-7 paper, token by token: the yardstick for the rwkv7 block, its
// fused and op-by-op paths, and the language model built of it. Written for
// clarity, not speed; it reads only the weights, never the module's code.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "model/mixers/mixer.h"

namespace attn::reference {

using Vector = std::vector<double>;
using Matrix = std::vector<Vector>;  // [rows][columns]

// Helpers the references share: a tensor's values, y = W x for W
// [out][in], LayerNorm with eps 1e-5, the logistic function, and
// a + (previous - a) * mu per channel.
Vector ToVector(const torch::Tensor& t);
Vector Apply(const Matrix& w, const Vector& x);
Vector LayerNorm(const Vector& x, const Vector& gain, const Vector& bias);
double Sigmoid(double z);
Vector Lerp(const Vector& a, const Vector& previous, const Vector& mu);

// One block's weights in float64; names as in model/mixers/rwkv7.h.
struct Rwkv7Weights {
  bool first = false;  // layer 0: ln0, and its values are the residual's
  Vector ln0_gain, ln0_bias, ln1_gain, ln1_bias, ln2_gain, ln2_bias;
  Vector mix_r, mix_w, mix_k, mix_v, mix_i, mix_g, ffn_mix;
  Vector decay_bias, iclr_bias, value_bias, key_norm_scale, key_iclr_scale;
  Vector out_norm_gain, out_norm_bias;
  Matrix bonus;                           // [H][N]
  Matrix receptance, key, value, output;  // [out][in]
  Matrix decay_down, decay_up, iclr_down, iclr_up, value_down, value_up, gate_down, gate_up;
  Matrix ffn_key, ffn_value;
};

// The weights of `block` (an Rwkv7 mixer), read by parameter name.
Rwkv7Weights Rwkv7WeightsOf(const SequenceMixer& block);

// A sequence's state in one block: the two shifts and S [H][N][N] (rows:
// value channels).
struct Rwkv7State {
  Vector att_shift, ffn_shift;
  std::vector<Matrix> wkv;
};
Rwkv7State EmptyRwkv7State(int64_t channels, int64_t heads);

// Runs the inputs x_t ([T][C]) of one sequence through `blocks` in order,
// continuing `states` (one per block), and returns the last block's outputs.
// The first block's values are every later block's value residual.
Matrix Rwkv7Stack(const std::vector<Rwkv7Weights>& blocks, int64_t heads, double group_norm_eps,
                  const Matrix& inputs, std::vector<Rwkv7State>& states);

// Converts between [T][C] and a float64 tensor [T, C].
Matrix ToMatrix(const torch::Tensor& t);
torch::Tensor FromMatrix(const Matrix& m);

}  // namespace attn::reference
