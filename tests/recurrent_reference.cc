#include "tests/recurrent_reference.h"

#include <cmath>
#include <memory>

namespace attn::reference {
namespace {

double Silu(double z) { return z * Sigmoid(z); }
double Softplus(double z) { return z > 20 ? z : std::log1p(std::exp(z)); }

Vector RmsNorm(const Vector& x, const Vector& gain) {
  double mean_square = 0.0;
  for (double v : x) mean_square += v * v;
  mean_square /= x.size();
  Vector y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] / std::sqrt(mean_square + 1e-5) * gain[i];
  return y;
}

}  // namespace

Params ParamsOf(const torch::nn::Module& module, const std::string& prefix) {
  Params params;
  for (const auto& p : module.named_parameters()) {
    if (p.key().rfind(prefix, 0) != 0) continue;
    params[p.key().substr(prefix.size())] = p.value().detach().to(torch::kDouble);
  }
  return params;
}

Rwkv4Block::Rwkv4Block(const Params& p, bool first, bool halve)
    : p_(p), first_(first), halve_(halve) {}

Vector Rwkv4Block::Vec(const std::string& name) const { return ToVector(p_.at(name)); }
Matrix Rwkv4Block::Mat(const std::string& name) const { return ToMatrix(p_.at(name)); }

Vector Rwkv4Block::Next(const Vector& input) {
  const size_t c = input.size();
  if (att_shift_.empty()) att_shift_.assign(c, 0.0), ffn_shift_.assign(c, 0.0);
  Vector x = first_ ? LayerNorm(input, Vec("ln0.gain"), Vec("ln0.bias")) : input;
  const Vector a = LayerNorm(x, Vec("ln1.gain"), Vec("ln1.bias"));
  // Lerp(a, prev, mu) = a + (prev - a) mu; RWKV-4 weighs the current token
  // by mu: prev + (a - prev) mu = Lerp(prev, a, mu).
  const Vector k = Apply(Mat("key.weight"), Lerp(att_shift_, a, Vec("mix_k")));
  const Vector v = Apply(Mat("value.weight"), Lerp(att_shift_, a, Vec("mix_v")));
  Vector r = Apply(Mat("receptance.weight"), Lerp(att_shift_, a, Vec("mix_r")));
  att_shift_ = a;
  const Vector decay = Vec("time_decay"), first = Vec("time_first");
  Vector rwkv(c);
  const size_t t = keys_.size();
  for (size_t i = 0; i < c; ++i) {
    const double w = -std::exp(decay[i]);
    double num = std::exp(first[i] + k[i]) * v[i], den = std::exp(first[i] + k[i]);
    for (size_t j = 0; j < t; ++j) {
      const double weight = std::exp(static_cast<double>(t - 1 - j) * w + keys_[j][i]);
      num += weight * values_[j][i];
      den += weight;
    }
    rwkv[i] = Sigmoid(r[i]) * num / den;
  }
  keys_.push_back(k);
  values_.push_back(v);
  Vector h = Apply(Mat("output.weight"), rwkv);
  for (size_t i = 0; i < c; ++i) h[i] += x[i];
  const Vector b = LayerNorm(h, Vec("ln2.gain"), Vec("ln2.bias"));
  const Vector gate = Apply(Mat("ffn_receptance.weight"), Lerp(ffn_shift_, b, Vec("ffn_mix_r")));
  Vector hidden = Apply(Mat("ffn_key.weight"), Lerp(ffn_shift_, b, Vec("ffn_mix_k")));
  ffn_shift_ = b;
  for (double& z : hidden) z = z > 0 ? z * z : 0.0;
  const Vector ffn = Apply(Mat("ffn_value.weight"), hidden);
  Vector out(c);
  for (size_t i = 0; i < c; ++i) out[i] = (h[i] + Sigmoid(gate[i]) * ffn[i]) * (halve_ ? 0.5 : 1.0);
  return out;
}

Mamba2Block::Mamba2Block(const Params& p, int64_t heads, const Mamba2Sizes& sizes)
    : p_(p), heads_(heads), sizes_(sizes) {}

Vector Mamba2Block::Next(const Vector& h) {
  const int64_t d = static_cast<int64_t>(h.size()), inner = sizes_.expand * d;
  const int64_t n = sizes_.state_size, g = sizes_.groups, p = inner / heads_;
  const int64_t channels = inner + 2 * g * n, width = sizes_.conv_kernel;
  if (state_.empty()) state_.assign(heads_, Matrix(p, Vector(n, 0.0)));
  const Vector projected =
      Apply(ToMatrix(p_.at("in_proj.weight")), RmsNorm(h, ToVector(p_.at("norm.gain"))));
  inputs_.push_back(Vector(projected.begin() + inner, projected.begin() + inner + channels));
  const auto conv = p_.at("conv_weight");  // [channels, 1, W]
  const Vector conv_bias = ToVector(p_.at("conv_bias"));
  Vector xbc(channels);
  const int64_t t = static_cast<int64_t>(inputs_.size()) - 1;
  for (int64_t ch = 0; ch < channels; ++ch) {
    double sum = conv_bias[ch];
    for (int64_t j = 0; j < width; ++j) {
      const int64_t at = t - (width - 1) + j;  // inputs before the sequence are zero
      if (at >= 0) sum += conv[ch][0][j].item<double>() * inputs_[at][ch];
    }
    xbc[ch] = Silu(sum);
  }
  const Vector dt_bias = ToVector(p_.at("dt_bias")), a_log = ToVector(p_.at("a_log"));
  const Vector skip = ToVector(p_.at("skip"));
  Vector y(inner);
  for (int64_t head = 0; head < heads_; ++head) {
    const int64_t group = head / (heads_ / g);
    const double dt = Softplus(projected[inner + channels + head] + dt_bias[head]);
    const double decay = std::exp(-dt * std::exp(a_log[head]));
    for (int64_t i = 0; i < p; ++i) {
      const double x = xbc[head * p + i];
      double out = skip[head] * x;
      for (int64_t j = 0; j < n; ++j) {
        double& s = state_[head][i][j];
        s = decay * s + dt * x * xbc[inner + group * n + j];
        out += s * xbc[inner + g * n + group * n + j];
      }
      y[head * p + i] = out;
    }
  }
  const Vector norm_weight = ToVector(p_.at("out_norm_weight"));
  const int64_t per_group = inner / g;
  for (int64_t i = 0; i < inner; ++i) y[i] *= Silu(projected[i]);
  for (int64_t group = 0; group < g; ++group) {
    double mean_square = 0.0;
    for (int64_t i = 0; i < per_group; ++i)
      mean_square += y[group * per_group + i] * y[group * per_group + i];
    mean_square /= per_group;
    for (int64_t i = 0; i < per_group; ++i) {
      const int64_t at = group * per_group + i;
      y[at] = y[at] / std::sqrt(mean_square + 1e-5) * norm_weight[at];
    }
  }
  Vector out = Apply(ToMatrix(p_.at("out_proj.weight")), y);
  for (int64_t i = 0; i < d; ++i) out[i] += h[i];
  return out;
}

Matrix LmLogits(const LmConfig& config, const Params& params, const std::vector<int64_t>& tokens) {
  auto block_params = [&](int64_t layer) {
    const std::string prefix = "layers." + std::to_string(layer) + ".mixer.";
    Params p;
    for (const auto& [name, value] : params) {
      if (name.rfind(prefix, 0) == 0) p[name.substr(prefix.size())] = value;
    }
    return p;
  };
  std::vector<std::unique_ptr<Rwkv4Block>> rwkv4;
  std::vector<std::unique_ptr<Mamba2Block>> mamba2;
  for (int64_t l = 0; l < config.layers; ++l) {
    if (config.mixer == MixerKind::kRwkv4) {
      const bool halve = config.rescale_every > 0 && (l + 1) % config.rescale_every == 0;
      rwkv4.push_back(std::make_unique<Rwkv4Block>(block_params(l), l == 0, halve));
    } else {
      mamba2.push_back(std::make_unique<Mamba2Block>(block_params(l), config.heads, config.mamba2));
    }
  }
  const Matrix embedding = ToMatrix(params.at("embedding.weight"));
  const Matrix head = config.tie_embeddings ? embedding : ToMatrix(params.at("head_weight"));
  Matrix logits;
  for (int64_t token : tokens) {
    Vector h = embedding.at(token);
    for (auto& block : rwkv4) h = block->Next(h);
    for (auto& block : mamba2) h = block->Next(h);
    const Vector gain = ToVector(params.at("final_norm.gain"));
    h = config.mixer == MixerKind::kRwkv4
            ? LayerNorm(h, gain, ToVector(params.at("final_norm.bias")))
            : RmsNorm(h, gain);
    logits.push_back(Apply(head, h));
  }
  return logits;
}

}  // namespace attn::reference
