// Literal float64 nested-loop implementations of each paper's equation, the
// yardstick for the modules. They are written for clarity, not speed: every
// sum is an explicit loop, every softmax subtracts its own row maximum. They
// read only a module's weights, never its code paths.
#pragma once

#include <torch/torch.h>

#include <array>
#include <vector>

namespace attn::reference {

// q, k, v [B, T, D] in float64 from a d -> 3d projection with rows [Wq;Wk;Wv].
std::array<torch::Tensor, 3> ProjectQkv(torch::nn::Linear in_proj, const torch::Tensor& query,
                                        const torch::Tensor& key_value);

// y W_o^T + b_o in float64.
torch::Tensor ApplyLinear(torch::nn::Linear layer, const torch::Tensor& y);

// Multi-head softmax attention. q [B, Tq, D], k, v [B, Tk, D]; query i sits at
// position offset + i, key j at j. causal masks j > offset + i. slopes (one
// per head, may be empty) add -m_h |offset + i - j|. padding [B][Tk] (may be
// empty) masks keys.
torch::Tensor SoftmaxAttention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, int64_t heads, bool causal, int64_t offset,
                               const std::vector<double>& slopes,
                               const std::vector<std::vector<bool>>& padding = {});

// Linear attention, feature map elu+1 or exp(x - max x) per head. With
// `decay` (one g_h per head; causal only), key j enters query i's sums with
// weight g_h^(i - j) (linear-decay).
torch::Tensor LinearAttention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, int64_t heads, bool exp_feature, bool causal,
                              double eps, const std::vector<double>& decay = {});

// Causal AFT: Y_t = sigmoid(Q_t) sum_{t'<=t} exp(K_t' + w[h(d), t, t']) V_t' /
// sum_{t'<=t} exp(K_t' + w[h(d), t, t']); w [G, T, T], channels split into G
// groups. Each (t, d) subtracts the maximum of its own exponents.
torch::Tensor Aft(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                  const torch::Tensor& w);

// AFT with a decayed past (model/mixers/aft_decay.h): w_{t,t'} =
// u[h(d)][t - t'] for t - t' < s (s = u.size(1)), -lambda[d] (t - t' - s)
// beyond; u [H, s], lambda [D], channels split into H heads. The same loop
// as Aft with w computed from its formula on the fly, so that contexts of
// 10,000 tokens need no [D, T, T] table.
torch::Tensor AftDecay(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const torch::Tensor& u, const torch::Tensor& lambda);

// Transformer-XL attention: q [B, Tq, D] at positions offset + i; k, v
// [B, Tk, D] at 0..Tk-1; u, vb [H, Dh]; w_r [D, D] maps the sinusoidal
// embedding of distance i - j (computed here from its formula).
torch::Tensor RelativeAttention(const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& v, const torch::Tensor& u,
                                const torch::Tensor& vb, const torch::Tensor& w_r, int64_t heads,
                                int64_t offset);

// The sinusoidal embedding of one position, from the formula.
std::vector<double> Sinusoid(int64_t position, int64_t d_model);

}  // namespace attn::reference
