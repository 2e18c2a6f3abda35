#include "tests/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tests/rwkv7_reference.h"  // Sigmoid, shared by the references

namespace attn::reference {
namespace {

using Acc3 = torch::TensorAccessor<double, 3>;

void FeatureMap(const double* x, int64_t n, bool exp_feature, double* out) {
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  for (int64_t i = 0; i < n; ++i) {
    if (exp_feature) {
      out[i] = std::exp(x[i] - max);
    } else {
      out[i] = x[i] > 0 ? x[i] + 1.0 : std::exp(x[i]);  // elu(x) + 1
    }
  }
}

// Softmax-weighted sum of value rows: out[c] = sum_j p_j v[j][c].
void WeightedSum(const std::vector<double>& logits, const std::vector<int64_t>& keys, const Acc3& v,
                 int64_t b, int64_t c0, int64_t width, double* out) {
  double max = -std::numeric_limits<double>::infinity();
  for (double l : logits) max = std::max(max, l);
  double total = 0;
  for (double l : logits) total += std::exp(l - max);
  for (int64_t c = 0; c < width; ++c) out[c] = 0;
  for (size_t n = 0; n < keys.size(); ++n) {
    const double p = std::exp(logits[n] - max) / total;
    for (int64_t c = 0; c < width; ++c) out[c] += p * v[b][keys[n]][c0 + c];
  }
}

}  // namespace

std::array<torch::Tensor, 3> ProjectQkv(torch::nn::Linear in_proj, const torch::Tensor& query,
                                        const torch::Tensor& key_value) {
  auto w = in_proj->weight.detach().to(torch::kDouble);
  auto b = in_proj->bias.detach().to(torch::kDouble);
  const int64_t d = w.size(0) / 3;
  auto project = [&](const torch::Tensor& x, int64_t part) {
    return torch::matmul(x.to(torch::kDouble), w.narrow(0, part * d, d).t()) +
           b.narrow(0, part * d, d);
  };
  return {project(query, 0), project(key_value, 1), project(key_value, 2)};
}

torch::Tensor ApplyLinear(torch::nn::Linear layer, const torch::Tensor& y) {
  auto out = torch::matmul(y.to(torch::kDouble), layer->weight.detach().to(torch::kDouble).t());
  if (layer->bias.defined()) out = out + layer->bias.detach().to(torch::kDouble);
  return out;
}

std::vector<double> Sinusoid(int64_t position, int64_t d_model) {
  std::vector<double> pe(d_model);
  for (int64_t i = 0; i < d_model / 2; ++i) {
    const double angle = position / std::pow(10000.0, 2.0 * i / d_model);
    pe[2 * i] = std::sin(angle);
    pe[2 * i + 1] = std::cos(angle);
  }
  return pe;
}

torch::Tensor SoftmaxAttention(const torch::Tensor& q_in, const torch::Tensor& k_in,
                               const torch::Tensor& v_in, int64_t heads, bool causal,
                               int64_t offset, const std::vector<double>& slopes,
                               const std::vector<std::vector<bool>>& padding) {
  auto q = q_in.to(torch::kDouble).contiguous(), k = k_in.to(torch::kDouble).contiguous(),
       v = v_in.to(torch::kDouble).contiguous();
  const int64_t batch = q.size(0), tq = q.size(1), tk = k.size(1), d = q.size(2);
  const int64_t dh = d / heads;
  auto out = torch::zeros({batch, tq, d}, torch::kDouble);
  auto qa = q.accessor<double, 3>(), ka = k.accessor<double, 3>(), va = v.accessor<double, 3>();
  auto oa = out.accessor<double, 3>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < tq; ++i) {
        std::vector<double> logits;
        std::vector<int64_t> keys;
        for (int64_t j = 0; j < tk; ++j) {
          if (causal && j > offset + i) continue;
          if (!padding.empty() && padding[b][j]) continue;
          double dot = 0;
          for (int64_t c = 0; c < dh; ++c) dot += qa[b][i][h * dh + c] * ka[b][j][h * dh + c];
          double logit = dot / std::sqrt(static_cast<double>(dh));
          if (!slopes.empty()) logit -= slopes[h] * std::abs(static_cast<double>(offset + i - j));
          logits.push_back(logit);
          keys.push_back(j);
        }
        std::vector<double> y(dh, 0.0);
        if (!keys.empty()) WeightedSum(logits, keys, va, b, h * dh, dh, y.data());
        for (int64_t c = 0; c < dh; ++c) oa[b][i][h * dh + c] = y[c];
      }
    }
  }
  return out;
}

torch::Tensor LinearAttention(const torch::Tensor& q_in, const torch::Tensor& k_in,
                              const torch::Tensor& v_in, int64_t heads, bool exp_feature,
                              bool causal, double eps, const std::vector<double>& decay) {
  auto q = q_in.to(torch::kDouble).contiguous(), k = k_in.to(torch::kDouble).contiguous(),
       v = v_in.to(torch::kDouble).contiguous();
  const int64_t batch = q.size(0), tq = q.size(1), tk = k.size(1), d = q.size(2);
  const int64_t dh = d / heads;
  auto out = torch::zeros({batch, tq, d}, torch::kDouble);
  auto va = v.accessor<double, 3>();
  auto oa = out.accessor<double, 3>();
  std::vector<double> phi_q(dh), phi_k(dh);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < tq; ++i) {
        FeatureMap(q[b][i].data_ptr<double>() + h * dh, dh, exp_feature, phi_q.data());
        std::vector<double> num(dh, 0.0);
        double den = 0;
        for (int64_t j = 0; j < tk; ++j) {
          if (causal && j > i) continue;
          FeatureMap(k[b][j].data_ptr<double>() + h * dh, dh, exp_feature, phi_k.data());
          double sim = 0;
          for (int64_t c = 0; c < dh; ++c) sim += phi_q[c] * phi_k[c];
          if (!decay.empty()) sim *= std::pow(decay[h], static_cast<double>(i - j));
          for (int64_t c = 0; c < dh; ++c) num[c] += sim * va[b][j][h * dh + c];
          den += sim;
        }
        for (int64_t c = 0; c < dh; ++c) oa[b][i][h * dh + c] = num[c] / (den + eps);
      }
    }
  }
  return out;
}

torch::Tensor Aft(const torch::Tensor& q_in, const torch::Tensor& k_in, const torch::Tensor& v_in,
                  const torch::Tensor& w_in) {
  auto q = q_in.to(torch::kDouble).contiguous(), k = k_in.to(torch::kDouble).contiguous(),
       v = v_in.to(torch::kDouble).contiguous(), w = w_in.to(torch::kDouble).contiguous();
  const int64_t batch = q.size(0), time = q.size(1), d = q.size(2);
  const int64_t groups = w.size(0), width = d / groups;
  auto out = torch::zeros({batch, time, d}, torch::kDouble);
  auto qa = q.accessor<double, 3>(), ka = k.accessor<double, 3>(), va = v.accessor<double, 3>();
  auto wa = w.accessor<double, 3>();
  auto oa = out.accessor<double, 3>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < time; ++t) {
      for (int64_t c = 0; c < d; ++c) {
        const int64_t g = c / width;
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t s = 0; s <= t; ++s) max = std::max(max, ka[b][s][c] + wa[g][t][s]);
        double num = 0, den = 0;
        for (int64_t s = 0; s <= t; ++s) {
          const double e = std::exp(ka[b][s][c] + wa[g][t][s] - max);
          num += e * va[b][s][c];
          den += e;
        }
        oa[b][t][c] = Sigmoid(qa[b][t][c]) * num / den;
      }
    }
  }
  return out;
}

torch::Tensor AftDecay(const torch::Tensor& q_in, const torch::Tensor& k_in,
                       const torch::Tensor& v_in, const torch::Tensor& u_in,
                       const torch::Tensor& lambda_in) {
  auto q = q_in.to(torch::kDouble).contiguous(), k = k_in.to(torch::kDouble).contiguous(),
       v = v_in.to(torch::kDouble).contiguous();
  auto u = u_in.detach().to(torch::kDouble).contiguous();
  auto lambda = lambda_in.detach().to(torch::kDouble).contiguous();
  const int64_t batch = q.size(0), time = q.size(1), d = q.size(2);
  const int64_t heads = u.size(0), window = u.size(1), width = d / heads;
  auto out = torch::zeros({batch, time, d}, torch::kDouble);
  auto qa = q.accessor<double, 3>(), ka = k.accessor<double, 3>(), va = v.accessor<double, 3>();
  auto ua = u.accessor<double, 2>();
  auto la = lambda.accessor<double, 1>();
  auto oa = out.accessor<double, 3>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t c = 0; c < d; ++c) {
      auto w = [&](int64_t t, int64_t s) {
        const int64_t distance = t - s;
        return distance < window ? ua[c / width][distance]
                                 : -la[c] * static_cast<double>(distance - window);
      };
      for (int64_t t = 0; t < time; ++t) {
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t s = 0; s <= t; ++s) max = std::max(max, ka[b][s][c] + w(t, s));
        double num = 0, den = 0;
        for (int64_t s = 0; s <= t; ++s) {
          const double e = std::exp(ka[b][s][c] + w(t, s) - max);
          num += e * va[b][s][c];
          den += e;
        }
        oa[b][t][c] = Sigmoid(qa[b][t][c]) * num / den;
      }
    }
  }
  return out;
}

torch::Tensor RelativeAttention(const torch::Tensor& q_in, const torch::Tensor& k_in,
                                const torch::Tensor& v_in, const torch::Tensor& u_in,
                                const torch::Tensor& vb_in, const torch::Tensor& w_r_in,
                                int64_t heads, int64_t offset) {
  auto q = q_in.to(torch::kDouble).contiguous(), k = k_in.to(torch::kDouble).contiguous(),
       v = v_in.to(torch::kDouble).contiguous();
  auto u = u_in.detach().to(torch::kDouble).contiguous();
  auto vb = vb_in.detach().to(torch::kDouble).contiguous();
  auto w_r = w_r_in.detach().to(torch::kDouble).contiguous();
  const int64_t batch = q.size(0), tq = q.size(1), tk = k.size(1), d = q.size(2);
  const int64_t dh = d / heads;
  auto out = torch::zeros({batch, tq, d}, torch::kDouble);
  auto qa = q.accessor<double, 3>(), ka = k.accessor<double, 3>(), va = v.accessor<double, 3>();
  auto ua = u.accessor<double, 2>(), vba = vb.accessor<double, 2>();
  auto wa = w_r.accessor<double, 2>();
  auto oa = out.accessor<double, 3>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < tq; ++i) {
        std::vector<double> logits;
        std::vector<int64_t> keys;
        for (int64_t j = 0; j <= offset + i && j < tk; ++j) {
          const auto pe = Sinusoid(offset + i - j, d);
          double score = 0;
          for (int64_t c = 0; c < dh; ++c) {
            const int64_t hc = h * dh + c;
            double r = 0;  // (W_r R_{i-j}) for channel hc
            for (int64_t e = 0; e < d; ++e) r += wa[hc][e] * pe[e];
            score += (qa[b][i][hc] + ua[h][c]) * ka[b][j][hc] + (qa[b][i][hc] + vba[h][c]) * r;
          }
          logits.push_back(score / std::sqrt(static_cast<double>(dh)));
          keys.push_back(j);
        }
        std::vector<double> y(dh);
        WeightedSum(logits, keys, va, b, h * dh, dh, y.data());
        for (int64_t c = 0; c < dh; ++c) oa[b][i][h * dh + c] = y[c];
      }
    }
  }
  return out;
}

}  // namespace attn::reference
