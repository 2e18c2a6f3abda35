#include "tests/rwkv7_reference.h"

#include <cmath>
#include <map>

namespace attn::reference {
Vector ToVector(const torch::Tensor& t) {
  const auto d = t.to(torch::kDouble).contiguous().view({-1});
  return Vector(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

// y = W x for W [out][in].
Vector Apply(const Matrix& w, const Vector& x) {
  Vector y(w.size(), 0.0);
  for (size_t o = 0; o < w.size(); ++o) {
    for (size_t i = 0; i < x.size(); ++i) y[o] += w[o][i] * x[i];
  }
  return y;
}

Vector LayerNorm(const Vector& x, const Vector& gain, const Vector& bias) {
  double mean = 0.0, var = 0.0;
  for (double v : x) mean += v;
  mean /= x.size();
  for (double v : x) var += (v - mean) * (v - mean);
  var /= x.size();
  Vector y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = (x[i] - mean) / std::sqrt(var + 1e-5) * gain[i] + bias[i];
  return y;
}

double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// a + (previous - a) * mu, channel by channel.
Vector Lerp(const Vector& a, const Vector& previous, const Vector& mu) {
  Vector y(a.size());
  for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] + (previous[i] - a[i]) * mu[i];
  return y;
}

namespace {

// One token through one block; `first_values` is read (layers > 0) or
// written (layer 0).
Vector Block(const Rwkv7Weights& p, int64_t heads, double eps, Vector x, Rwkv7State& s,
             Vector& first_values) {
  const size_t c = x.size(), n = c / heads;
  if (p.first) x = LayerNorm(x, p.ln0_gain, p.ln0_bias);
  const Vector a = LayerNorm(x, p.ln1_gain, p.ln1_bias);
  const Vector xr = Lerp(a, s.att_shift, p.mix_r), xw = Lerp(a, s.att_shift, p.mix_w);
  const Vector xk = Lerp(a, s.att_shift, p.mix_k), xv = Lerp(a, s.att_shift, p.mix_v);
  const Vector xi = Lerp(a, s.att_shift, p.mix_i), xg = Lerp(a, s.att_shift, p.mix_g);
  s.att_shift = a;
  const Vector r = Apply(p.receptance, xr);
  Vector k = Apply(p.key, xk), v = Apply(p.value, xv);
  Vector tanh_w = Apply(p.decay_down, xw);
  for (double& t : tanh_w) t = std::tanh(t);
  const Vector z = Apply(p.decay_up, tanh_w);
  Vector w(c), iclr(c), kk(c), g(c);
  for (size_t i = 0; i < c; ++i) w[i] = std::exp(-std::exp(-0.5) * Sigmoid(p.decay_bias[i] + z[i]));
  if (p.first) {
    first_values = v;
  } else {
    const Vector mix = Apply(p.value_up, Apply(p.value_down, xv));
    for (size_t i = 0; i < c; ++i) {
      v[i] += (first_values[i] - v[i]) * Sigmoid(p.value_bias[i] + mix[i]);
    }
  }
  const Vector iz = Apply(p.iclr_up, Apply(p.iclr_down, xi));
  for (size_t i = 0; i < c; ++i) iclr[i] = Sigmoid(p.iclr_bias[i] + iz[i]);
  Vector gate_low = Apply(p.gate_down, xg);
  for (double& t : gate_low) t = Sigmoid(t);
  g = Apply(p.gate_up, gate_low);
  for (size_t h = 0; h < static_cast<size_t>(heads); ++h) {
    double norm = 0.0;
    for (size_t j = 0; j < n; ++j) norm += std::pow(k[h * n + j] * p.key_norm_scale[h * n + j], 2);
    norm = std::max(std::sqrt(norm), 1e-12);
    for (size_t j = 0; j < n; ++j)
      kk[h * n + j] = k[h * n + j] * p.key_norm_scale[h * n + j] / norm;
  }
  for (size_t i = 0; i < c; ++i) k[i] *= 1.0 + (iclr[i] - 1.0) * p.key_iclr_scale[i];
  // S_t = S_{t-1} (diag(w) - kk^T (iclr * kk)) + v^T k, then o = S r: S
  // times the matrix, element by element.
  Vector o(c, 0.0);
  for (size_t h = 0; h < static_cast<size_t>(heads); ++h) {
    Matrix& S = s.wkv[h];
    Matrix next(n, Vector(n, 0.0));
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) {
        double sum = 0.0;
        for (size_t m = 0; m < n; ++m) {
          const double transition =
              (m == j ? w[h * n + j] : 0.0) - kk[h * n + m] * iclr[h * n + j] * kk[h * n + j];
          sum += S[i][m] * transition;
        }
        next[i][j] = sum + v[h * n + i] * k[h * n + j];
      }
    }
    S = next;
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) o[h * n + i] += S[i][j] * r[h * n + j];
    }
    double mean = 0.0, var = 0.0, bonus = 0.0;
    for (size_t i = 0; i < n; ++i) mean += o[h * n + i];
    mean /= n;
    for (size_t i = 0; i < n; ++i) var += std::pow(o[h * n + i] - mean, 2);
    var /= n;
    for (size_t j = 0; j < n; ++j) bonus += r[h * n + j] * k[h * n + j] * p.bonus[h][j];
    for (size_t i = 0; i < n; ++i) {
      const size_t ch = h * n + i;
      o[ch] = (o[ch] - mean) / std::sqrt(var + eps) * p.out_norm_gain[ch] + p.out_norm_bias[ch] +
              bonus * v[ch];
    }
  }
  for (size_t i = 0; i < c; ++i) o[i] *= g[i];
  const Vector attended = Apply(p.output, o);
  Vector h(c);
  for (size_t i = 0; i < c; ++i) h[i] = x[i] + attended[i];
  const Vector b = LayerNorm(h, p.ln2_gain, p.ln2_bias);
  Vector hidden = Apply(p.ffn_key, Lerp(b, s.ffn_shift, p.ffn_mix));
  s.ffn_shift = b;
  for (double& t : hidden) t = t > 0 ? t * t : 0.0;
  const Vector mixed = Apply(p.ffn_value, hidden);
  for (size_t i = 0; i < c; ++i) h[i] += mixed[i];
  return h;
}

}  // namespace

Matrix ToMatrix(const torch::Tensor& t) {
  const auto d = t.to(torch::kDouble).contiguous();
  Matrix m(d.size(0));
  for (int64_t r = 0; r < d.size(0); ++r) m[r] = ToVector(d[r]);
  return m;
}

torch::Tensor FromMatrix(const Matrix& m) {
  auto t = torch::empty({static_cast<int64_t>(m.size()), static_cast<int64_t>(m[0].size())},
                        torch::kDouble);
  for (size_t r = 0; r < m.size(); ++r) {
    for (size_t c = 0; c < m[r].size(); ++c) t[r][c] = m[r][c];
  }
  return t;
}

Rwkv7Weights Rwkv7WeightsOf(const SequenceMixer& block) {
  std::map<std::string, torch::Tensor> named;
  for (const auto& p : block.named_parameters()) named[p.key()] = p.value().detach();
  auto vec = [&](const std::string& name) {
    return named.count(name) ? ToVector(named[name]) : Vector();
  };
  auto mat = [&](const std::string& name) {
    return named.count(name) ? ToMatrix(named[name]) : Matrix();
  };
  Rwkv7Weights w;
  w.first = named.count("ln0.gain") > 0;
  w.ln0_gain = vec("ln0.gain"), w.ln0_bias = vec("ln0.bias");
  w.ln1_gain = vec("ln1.gain"), w.ln1_bias = vec("ln1.bias");
  w.ln2_gain = vec("ln2.gain"), w.ln2_bias = vec("ln2.bias");
  w.mix_r = vec("mix_r"), w.mix_w = vec("mix_w"), w.mix_k = vec("mix_k");
  w.mix_v = vec("mix_v"), w.mix_i = vec("mix_i"), w.mix_g = vec("mix_g");
  w.ffn_mix = vec("ffn_mix");
  w.decay_bias = vec("decay_bias"), w.iclr_bias = vec("iclr_bias");
  w.value_bias = vec("value_bias");
  w.key_norm_scale = vec("key_norm_scale"), w.key_iclr_scale = vec("key_iclr_scale");
  w.out_norm_gain = vec("out_norm_gain"), w.out_norm_bias = vec("out_norm_bias");
  w.bonus = mat("bonus");
  w.receptance = mat("receptance.weight"), w.key = mat("key.weight");
  w.value = mat("value.weight"), w.output = mat("output.weight");
  w.decay_down = mat("decay_down.weight"), w.decay_up = mat("decay_up.weight");
  w.iclr_down = mat("iclr_down.weight"), w.iclr_up = mat("iclr_up.weight");
  w.value_down = mat("value_down.weight"), w.value_up = mat("value_up.weight");
  w.gate_down = mat("gate_down.weight"), w.gate_up = mat("gate_up.weight");
  w.ffn_key = mat("ffn_key.weight"), w.ffn_value = mat("ffn_value.weight");
  return w;
}

Rwkv7State EmptyRwkv7State(int64_t channels, int64_t heads) {
  const size_t n = channels / heads;
  Rwkv7State s;
  s.att_shift.assign(channels, 0.0);
  s.ffn_shift.assign(channels, 0.0);
  s.wkv.assign(heads, Matrix(n, Vector(n, 0.0)));
  return s;
}

Matrix Rwkv7Stack(const std::vector<Rwkv7Weights>& blocks, int64_t heads, double group_norm_eps,
                  const Matrix& inputs, std::vector<Rwkv7State>& states) {
  Matrix outputs;
  for (const Vector& x : inputs) {
    Vector h = x, first_values;
    for (size_t l = 0; l < blocks.size(); ++l) {
      h = Block(blocks[l], heads, group_norm_eps, h, states[l], first_values);
    }
    outputs.push_back(h);
  }
  return outputs;
}

}  // namespace attn::reference
