#include "model/mixers/rwkv7.h"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "model/cuda/state_kernels.h"
#include "model/kernels/kernels.h"
#include "model/layers/dense.h"
#include "model/mixers/block_helpers.h"

namespace attn {
namespace {

// e^{-1/2}: w = exp(-e^{-1/2} sigmoid(z)) = exp(-exp(-softplus(-z) - 1/2)).
constexpr double kDecayScale = 0.60653065971263342;

// The reference trainer's initialisation of a mix, 1 - ddd^power, with
// ddd[n] = n / C.
torch::Tensor MixInit(int64_t channels, double power) {
  return 1.0 - torch::pow(torch::arange(channels, torch::kFloat) / channels, power);
}

// A parameter's floats for a kernel. Parameters are made and loaded
// contiguous; a strided one would be read wrongly, so it is refused.
const float* ParameterFloats(const torch::Tensor& t) {
  TORCH_CHECK(t.is_contiguous(),
              "rwkv7: the fused kernels need contiguous parameters, got strides ", t.strides());
  return t.data_ptr<float>();
}

// Points the CUDA kernels' arguments (cuda::Rwkv7StepArgs and
// Rwkv7ScanArgs name them alike) at the update's inputs, each laid out as
// the kernel reads it (r undefined: null).
template <typename Args>
void PointAtInputs(Args& args, const std::array<torch::Tensor, 6>& r_w_k_v_kk_iclr) {
  const auto& [r, w, k, v, kk, iclr] = r_w_k_v_kk_iclr;
  args.r = r.defined() ? r.data_ptr<float>() : nullptr;
  args.w = w.data_ptr<float>();
  args.k = k.data_ptr<float>();
  args.v = v.data_ptr<float>();
  args.kk = kk.data_ptr<float>();
  args.iclr = iclr.data_ptr<float>();
}

}  // namespace

// The tensors one call continues: copies of the rows' shifts, and their
// matrices, either in place in the pool (the fused update, rows by `ids`)
// or as this call's copy.
// The state's tensors, in order: the time mix's token shift [B, C], the
// matrices (the pool's [rows, H, N, N] when updated in place, else
// [B, H, N, N]), the channel mix's token shift [B, C].
enum : size_t { kAttShift, kWkv, kFfnShift };

// What Run keeps of a chunk for ReplayUpdates, in order, each [B, T, C].
enum : size_t { kKeptA, kKeptW, kKeptK, kKeptV, kKeptKk, kKeptIclr, kKeptB, kKeptCount };

// The time mix's per-token vectors for the state update; r and g only for
// the tokens whose output is wanted (the last `tail` of the chunk).
struct Rwkv7Impl::Mixed {
  torch::Tensor r, w, k, v, kk, iclr, g;  // [B, T, C], r and g [B, tail, C]
  int64_t tail = 0;
};

Rwkv7Impl::Rwkv7Impl(const MixerOptions& options) : WholeBlockMixer(options) {
  TORCH_CHECK(options.kind == MixerKind::kRwkv7, "Rwkv7 needs kind rwkv7");
  const int64_t c = options.d_model, heads = options.heads, layers_in = options.layer;
  TORCH_CHECK(c % heads == 0, "rwkv7: d_model (", c, ") must be divisible by heads (", heads, ")");
  const Rwkv7Ranks& ranks = options.rwkv7_ranks;
  TORCH_CHECK(ranks.decay > 0 && ranks.iclr > 0 && ranks.value > 0 && ranks.gate > 0,
              "rwkv7: low-rank sizes must be positive");
  TORCH_CHECK(options.ff_hidden > 0, "rwkv7: ff_hidden must be positive");
  const int64_t n = c / heads;
  auto linear = [&](const char* name, int64_t in, int64_t out) {
    return register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)));
  };
  // A layer's place in the model scales its initial mixes and decays, as in
  // the reference trainer (options.layer of an assumed 12-layer model when
  // used alone; only the starting point of training depends on it).
  const double depth = 12.0;
  const double to_one = std::min(1.0, static_cast<double>(layers_in) / (depth - 1));
  const double to_zero = 1.0 - std::min(1.0, static_cast<double>(layers_in) / depth);
  mix_r_ = register_parameter("mix_r", MixInit(c, 0.2 * to_zero));
  mix_w_ = register_parameter("mix_w", MixInit(c, 0.9 * to_zero));
  mix_k_ = register_parameter("mix_k", MixInit(c, 0.7 * to_zero));
  mix_v_ = register_parameter("mix_v", MixInit(c, 0.7 * to_zero));
  mix_i_ = register_parameter("mix_i", MixInit(c, 0.9 * to_zero));
  mix_g_ = register_parameter("mix_g", MixInit(c, 0.2 * to_zero));
  // Per channel: a position from -0.5 to 0.5 across the width, and a zigzag
  // across each head (-1 to 1, squared with its sign).
  const auto index = torch::arange(c, torch::kFloat);
  const auto linear_ramp = index / std::max<int64_t>(c - 1, 1) - 0.5;
  auto zigzag = (index.remainder(n) - (n - 1) / 2.0) / std::max((n - 1) / 2.0, 1.0);
  zigzag = zigzag * zigzag.abs();
  const auto decay_start =
      -6.0 + 6.0 * torch::pow(index / std::max<int64_t>(c - 1, 1), 1.0 + std::pow(to_one, 0.3));
  decay_bias_ = register_parameter("decay_bias", decay_start + 0.5 + zigzag * 2.5);
  iclr_bias_ = register_parameter("iclr_bias", -0.19 + zigzag * 0.3 + linear_ramp * 0.4);
  key_norm_scale_ = register_parameter("key_norm_scale", 0.71 - linear_ramp * 0.1);
  key_iclr_scale_ = register_parameter("key_iclr_scale", torch::full({c}, 1.02));
  bonus_ = register_parameter("bonus", torch::full({heads, n}, -0.04));
  out_norm_gain_ =
      register_parameter("out_norm_gain", torch::full({c}, std::pow((layers_in + 1) / depth, 0.7)));
  out_norm_bias_ = register_parameter("out_norm_bias", torch::zeros({c}));
  ffn_mix_ = register_parameter("ffn_mix", MixInit(c, std::pow(to_zero, 4)));
  receptance_ = linear("receptance", c, c);
  key_ = linear("key", c, c);
  value_ = linear("value", c, c);
  output_ = linear("output", c, c);
  decay_down_ = linear("decay_down", c, ranks.decay);
  decay_up_ = linear("decay_up", ranks.decay, c);
  iclr_down_ = linear("iclr_down", c, ranks.iclr);
  iclr_up_ = linear("iclr_up", ranks.iclr, c);
  if (options.layer > 0) {
    value_bias_ = register_parameter("value_bias", 0.73 - linear_ramp * 0.4);
    value_down_ = linear("value_down", c, ranks.value);
    value_up_ = linear("value_up", ranks.value, c);
  }
  gate_down_ = linear("gate_down", c, ranks.gate);
  gate_up_ = linear("gate_up", ranks.gate, c);
  ffn_key_ = linear("ffn_key", c, options.ff_hidden);
  ffn_value_ = linear("ffn_value", options.ff_hidden, c);
  if (options.layer == 0) ln0_ = register_module("ln0", Norm(NormKind::kLayerNorm, c));
  ln1_ = register_module("ln1", Norm(NormKind::kLayerNorm, c));
  ln2_ = register_module("ln2", Norm(NormKind::kLayerNorm, c));
  // The low-rank paths start at their bias (down projections at zero, so
  // that gradients reach them through the small up projections); the key
  // projection small, the block's two outputs at zero: a new block passes
  // its input through.
  torch::NoGradGuard no_grad;
  for (auto* down : {&decay_down_, &iclr_down_, &value_down_, &gate_down_}) {
    if (!down->is_empty()) (*down)->weight.zero_();
  }
  for (auto* up : {&decay_up_, &iclr_up_, &value_up_, &gate_up_}) {
    if (!up->is_empty()) (*up)->weight.normal_(0.0, 0.1 / std::sqrt(static_cast<double>(c)));
  }
  key_->weight.mul_(0.1);
  output_->weight.zero_();
  ffn_value_->weight.zero_();
}

int64_t Rwkv7Impl::state_bytes_per_sequence(int64_t /*context*/) const {
  const int64_t c = options_.d_model;
  return (2 * c + c * head_size()) * static_cast<int64_t>(sizeof(float)) +
         static_cast<int64_t>(sizeof(int64_t));
}

MixerState Rwkv7Impl::initial_state(int64_t rows, torch::Device device) const {
  const auto opts = torch::TensorOptions().dtype(torch::kFloat).device(device);
  const int64_t c = options_.d_model, n = head_size();
  MixerState state;
  state.length = torch::zeros({rows}, opts.dtype(torch::kLong));
  state.tensors = {torch::zeros({rows, c}, opts), torch::zeros({rows, options_.heads, n, n}, opts),
                   torch::zeros({rows, c}, opts)};
  return state;
}

Elementwise Rwkv7Impl::ElementwiseFor(const torch::Tensor& a, const torch::Tensor& shift,
                                      bool fused) {
  if (fused) return Elementwise::kCpu;
  return CudaStepApplies({&a, &shift}) ? Elementwise::kGpu : Elementwise::kOps;
}

std::array<torch::Tensor, 6> Rwkv7Impl::Mixes(const torch::Tensor& a, const torch::Tensor& shift,
                                              Elementwise how) const {
  const std::array<const torch::Tensor*, 6> mus = {&mix_r_, &mix_w_, &mix_k_,
                                                   &mix_v_, &mix_i_, &mix_g_};
  std::array<torch::Tensor, 6> out;
  if (how == Elementwise::kOps) {
    const auto delta = Shifted(a, shift) - a;
    for (size_t i = 0; i < mus.size(); ++i) out[i] = torch::addcmul(a, delta, *mus[i]);
    return out;
  }
  const auto input = a.contiguous(), previous = shift.contiguous();
  const auto all = torch::empty({6, a.size(0), a.size(1), a.size(2)}, a.options());
  std::array<const float*, 6> mixes;
  for (size_t i = 0; i < mus.size(); ++i) mixes[i] = ParameterFloats(*mus[i]);
  kernels::TokenShiftMixArgs args;
  args.batch = a.size(0);
  args.time = a.size(1);
  args.channels = a.size(2);
  args.count = static_cast<int64_t>(mixes.size());
  args.x = input.data_ptr<float>();
  args.shift = previous.data_ptr<float>();
  args.mixes = mixes.data();
  args.out = all.data_ptr<float>();
  if (how == Elementwise::kCpu) {
    kernels::TokenShiftMix(args);
  } else {
    RunOnGpu(a.device(), "rwkv7's token shift",
             [&](void* stream) { return cuda::Rwkv7Mix(args, stream); });
  }
  for (size_t i = 0; i < out.size(); ++i) out[i] = all[static_cast<int64_t>(i)];
  return out;
}

Rwkv7Impl::Mixed Rwkv7Impl::TimeMixInputs(const torch::Tensor& a, const torch::Tensor& shift,
                                          LayerCarry& carry, int64_t tail, Elementwise how) {
  const int64_t time = a.size(1);
  const auto [xr, xw, xk, xv, xi, xg] = Mixes(a, shift, how);
  auto last = [&](const torch::Tensor& t) { return t.narrow(1, time - tail, tail); };
  Mixed m;
  m.tail = tail;
  m.r = Project(last(xr), receptance_);
  m.k = Project(xk, key_);
  m.v = Project(xv, value_);
  m.w = Project(torch::tanh(Project(xw, decay_down_)), decay_up_);
  torch::Tensor gate, first;
  if (options_.layer == 0) {
    carry.first_values = m.v;
  } else if (carry.first_values.defined()) {
    gate = Project(Project(xv, value_down_), value_up_);
    first = carry.first_values;
  }
  m.iclr = Project(Project(xi, iclr_down_), iclr_up_);
  m.g = Project(torch::sigmoid(Project(last(xg), gate_down_)), gate_up_);
  Activate(m, gate, first, how);
  return m;
}

void Rwkv7Impl::Activate(Mixed& m, const torch::Tensor& gate, const torch::Tensor& first,
                         Elementwise how) const {
  if (how == Elementwise::kOps) {
    const int64_t batch = m.k.size(0), time = m.k.size(1), c = options_.d_model;
    m.w = torch::exp(torch::sigmoid(decay_bias_ + m.w) * -kDecayScale);
    if (first.defined()) m.v = torch::addcmul(m.v, first - m.v, torch::sigmoid(value_bias_ + gate));
    m.iclr = torch::sigmoid(iclr_bias_ + m.iclr);
    const auto scaled = (m.k * key_norm_scale_).view({batch, time, options_.heads, head_size()});
    m.kk = (scaled / scaled.norm(2, -1, true).clamp_min(1e-12)).view({batch, time, c});
    m.k = m.k * (1.0 + (m.iclr - 1.0) * key_iclr_scale_);
    return;
  }
  // In place on the projections' own outputs; v is the first layer's
  // value residual (carry.first_values) only in layer 0, which has no first.
  for (torch::Tensor* t : {&m.w, &m.v, &m.iclr, &m.k}) *t = t->contiguous();
  m.kk = torch::empty_like(m.k);
  const auto gate_in = gate.defined() ? gate.contiguous() : gate;
  const auto first_in = first.defined() ? first.contiguous() : first;
  kernels::Rwkv7ActivationsArgs args;
  args.tokens = m.k.size(0) * m.k.size(1);
  args.heads = options_.heads;
  args.head_dim = head_size();
  args.w = m.w.data_ptr<float>();
  args.v = m.v.data_ptr<float>();
  args.iclr = m.iclr.data_ptr<float>();
  args.k = m.k.data_ptr<float>();
  args.kk = m.kk.data_ptr<float>();
  if (first.defined()) {
    args.first = first_in.data_ptr<float>();
    args.gate = gate_in.data_ptr<float>();
    args.value_bias = ParameterFloats(value_bias_);
  }
  args.decay_bias = ParameterFloats(decay_bias_);
  args.iclr_bias = ParameterFloats(iclr_bias_);
  args.key_norm_scale = ParameterFloats(key_norm_scale_);
  args.key_iclr_scale = ParameterFloats(key_iclr_scale_);
  args.decay_scale = static_cast<float>(kDecayScale);
  if (how == Elementwise::kCpu) {
    kernels::Rwkv7Activations(args);
  } else {
    RunOnGpu(m.k.device(), "rwkv7's activations",
             [&](void* stream) { return cuda::Rwkv7Activations(args, stream); });
  }
}

torch::Tensor Rwkv7Impl::StepOnGpu(const Mixed& m, torch::Tensor& wkv) const {
  if (!CudaStepApplies({&m.r, &m.w, &m.k, &m.v, &m.kk, &m.iclr, &wkv})) return {};
  const auto s_in = wkv.contiguous();
  auto s_out = torch::empty_like(s_in);
  torch::Tensor o = LaunchStep(m, s_in, s_out, torch::Tensor());
  wkv = s_out;
  return o;
}

torch::Tensor Rwkv7Impl::StepPoolRowsOnGpu(const Mixed& m, BlockRows& rows) const {
  TORCH_CHECK(CudaStepApplies({&m.r, &m.w, &m.k, &m.v, &m.kk, &m.iclr}),
              "rwkv7: a step on the pool's rows needs the CUDA kernel's inputs, got ",
              m.k.scalar_type(), " on ", m.k.device());
  torch::Tensor& pool = rows.tensors[kWkv];
  return LaunchStep(m, pool, pool, rows.device_ids);
}

torch::Tensor Rwkv7Impl::LaunchStep(const Mixed& m, const torch::Tensor& s_in,
                                    const torch::Tensor& s_out, const torch::Tensor& slots) const {
  const int64_t batch = m.k.size(0);
  const std::array<torch::Tensor, 6> inputs = {m.r.contiguous(),  m.w.contiguous(),
                                               m.k.contiguous(),  m.v.contiguous(),
                                               m.kk.contiguous(), m.iclr.contiguous()};
  auto o = torch::empty({batch, 1, options_.d_model}, m.k.options());
  cuda::Rwkv7StepArgs args;
  args.batch = batch;
  args.heads = options_.heads;
  args.head_dim = head_size();
  PointAtInputs(args, inputs);
  args.s_in = s_in.data_ptr<float>();
  args.s_out = s_out.data_ptr<float>();
  args.slots = slots.defined() ? slots.data_ptr<int64_t>() : nullptr;
  args.o = o.data_ptr<float>();
  RunOnGpu(s_in.device(), "rwkv7's step",
           [&](void* stream) { return cuda::Rwkv7Step(args, stream); });
  return o;
}

bool Rwkv7Impl::ScanOnGpu(const Mixed& m, torch::Tensor& wkv, torch::Tensor* o) const {
  if (!CudaStepApplies({&m.w, &m.k, &m.v, &m.kk, &m.iclr, &wkv})) return false;
  if (m.tail > 0 && !CudaStepApplies({&m.r})) return false;
  const int64_t batch = m.k.size(0), time = m.k.size(1);
  auto by_time = [](const torch::Tensor& t) { return t.transpose(0, 1).contiguous(); };
  const std::array<torch::Tensor, 6> inputs = {m.tail > 0 ? by_time(m.r) : torch::Tensor(),
                                               by_time(m.w),
                                               by_time(m.k),
                                               by_time(m.v),
                                               by_time(m.kk),
                                               by_time(m.iclr)};
  // A copy, updated in place: a caller may hold the state before the chunk.
  auto s = wkv.clone(torch::MemoryFormat::Contiguous);
  auto out = torch::empty({batch, m.tail, options_.d_model}, m.k.options());
  cuda::Rwkv7ScanArgs args;
  args.batch = batch;
  args.time = time;
  args.heads = options_.heads;
  args.head_dim = head_size();
  args.first_output = time - m.tail;
  PointAtInputs(args, inputs);
  args.s = s.data_ptr<float>();
  args.o = out.data_ptr<float>();
  RunOnGpu(s.device(), "rwkv7's scan", [&](void* stream) { return cuda::Rwkv7Scan(args, stream); });
  wkv = s;
  if (m.tail > 0) *o = out;
  return true;
}

torch::Tensor Rwkv7Impl::UpdateByOps(const Mixed& m, torch::Tensor& wkv) const {
  const int64_t batch = m.k.size(0), time = m.k.size(1), heads = options_.heads, n = head_size();
  if (time == 1 && m.tail == 1) {
    if (torch::Tensor o = StepOnGpu(m, wkv); o.defined()) return o;
  } else if (torch::Tensor o; ScanOnGpu(m, wkv, &o)) {
    return o;
  }
  const auto target = m.kk * m.iclr;
  auto column = [&](const torch::Tensor& t, int64_t i) {
    return t.select(1, i).view({batch, heads, n, 1});
  };
  auto row = [&](const torch::Tensor& t, int64_t i) {
    return t.select(1, i).view({batch, heads, 1, n});
  };
  torch::Tensor s = wkv;
  std::vector<torch::Tensor> outputs;
  for (int64_t t = 0; t < time; ++t) {
    const auto removed = torch::matmul(s, column(m.kk, t));  // S kk [B, H, N, 1]
    s = s * row(m.w, t) - torch::matmul(removed, row(target, t)) +
        torch::matmul(column(m.v, t), row(m.k, t));
    if (t >= time - m.tail) {
      outputs.push_back(torch::matmul(s, column(m.r, t - (time - m.tail))).view({batch, -1}));
    }
  }
  wkv = s;
  return outputs.empty() ? torch::Tensor() : torch::stack(outputs, 1);
}

torch::Tensor Rwkv7Impl::UpdateFused(const Mixed& m, BlockRows& rows, int64_t time) const {
  const int64_t batch = m.k.size(0), c = options_.d_model;
  torch::Tensor o = torch::empty({batch, m.tail, c}, m.k.options());
  kernels::Rwkv7UpdateArgs args;
  args.batch = batch;
  args.time = time;
  args.heads = options_.heads;
  args.head_dim = head_size();
  args.first_output = time - m.tail;
  args.slots = rows.ids;
  const auto r = m.r.contiguous(), w = m.w.contiguous(), k = m.k.contiguous(), v = m.v.contiguous(),
             kk = m.kk.contiguous(), iclr = m.iclr.contiguous();
  args.r = r.data_ptr<float>();
  args.w = w.data_ptr<float>();
  args.k = k.data_ptr<float>();
  args.v = v.data_ptr<float>();
  args.kk = kk.data_ptr<float>();
  args.a = iclr.data_ptr<float>();
  args.s = rows.tensors[kWkv].data_ptr<float>();
  args.out = o.data_ptr<float>();
  const auto gain = out_norm_gain_.contiguous(), bias = out_norm_bias_.contiguous(),
             bonus = bonus_.contiguous();
  args.norm_gain = gain.data_ptr<float>();
  args.norm_bias = bias.data_ptr<float>();
  args.bonus = bonus.data_ptr<float>();
  args.norm_eps = static_cast<float>(options_.group_norm_eps);
  kernels::Rwkv7Update(args);
  return o;
}

torch::Tensor Rwkv7Impl::OutputByOps(const torch::Tensor& o, const Mixed& m) const {
  const int64_t batch = o.size(0), tail = m.tail, time = m.k.size(1), c = options_.d_model;
  const int64_t heads = options_.heads, n = head_size();
  auto last = [&](const torch::Tensor& t) { return t.narrow(1, time - tail, tail); };
  const auto per_head = o.view({batch, tail, heads, n});
  const auto mean = per_head.mean(-1, true);
  const auto centered = per_head - mean;
  const auto variance = centered.square().mean(-1, true);
  auto y = (centered * torch::rsqrt(variance + options_.group_norm_eps)).view({batch, tail, c});
  y = torch::addcmul(out_norm_bias_, y, out_norm_gain_);
  const auto k_tail = last(m.k).view({batch, tail, heads, n});
  const auto v_tail = last(m.v).view({batch, tail, heads, n});
  const auto bonus = (m.r.view({batch, tail, heads, n}) * k_tail * bonus_).sum(-1, true);
  return y + (bonus * v_tail).view({batch, tail, c});
}

torch::Tensor Rwkv7Impl::OutputOnGpu(const torch::Tensor& o, const Mixed& m) const {
  const auto o_in = o.contiguous(), r = m.r.contiguous(), k = m.k.contiguous(),
             v = m.v.contiguous();
  auto out = torch::empty_like(o_in);
  cuda::Rwkv7HeadOutputArgs args;
  args.batch = o.size(0);
  args.time = m.k.size(1);
  args.tail = m.tail;
  args.heads = options_.heads;
  args.head_dim = head_size();
  args.eps = static_cast<float>(options_.group_norm_eps);
  args.o = o_in.data_ptr<float>();
  args.r = r.data_ptr<float>();
  args.k = k.data_ptr<float>();
  args.v = v.data_ptr<float>();
  args.gain = ParameterFloats(out_norm_gain_);
  args.bias = ParameterFloats(out_norm_bias_);
  args.bonus = ParameterFloats(bonus_);
  args.out = out.data_ptr<float>();
  RunOnGpu(o.device(), "rwkv7's head output",
           [&](void* stream) { return cuda::Rwkv7HeadOutput(args, stream); });
  return out;
}

torch::Tensor Rwkv7Impl::ChannelMix(const torch::Tensor& h, torch::Tensor& shift,
                                    torch::Tensor* normed) {
  const torch::Tensor b = ln2_->forward(h);
  if (normed != nullptr) *normed = b;
  const ShiftedTail tail = ShiftTail(b, h, shift);
  const auto input = torch::addcmul(tail.current, tail.previous - tail.current, ffn_mix_);
  return tail.residual + Project(torch::relu(Project(input, ffn_key_)).square(), ffn_value_);
}

torch::Tensor Rwkv7Impl::Run(const torch::Tensor& x, BlockRows& rows, int64_t keep,
                             LayerCarry& carry) {
  const int64_t time = x.size(1);
  const torch::Tensor input = options_.layer == 0 ? ln0_->forward(x) : x;
  const torch::Tensor a = ln1_->forward(input);
  const int64_t tail = OutputTail(time, keep);
  const Elementwise how = ElementwiseFor(a, rows.tensors[kAttShift], rows.fused());
  Mixed m = TimeMixInputs(a, rows.tensors[kAttShift], carry, tail, how);
  rows.tensors[kAttShift] = a.select(1, time - 1).clone();
  torch::Tensor y;
  if (rows.fused()) {
    y = UpdateFused(m, rows, time);
  } else {
    const torch::Tensor o =
        rows.gpu_step() ? StepPoolRowsOnGpu(m, rows) : UpdateByOps(m, rows.tensors[kWkv]);
    y = how == Elementwise::kGpu ? OutputOnGpu(o, m) : OutputByOps(o, m);
  }
  auto last = [&](const torch::Tensor& t) { return t.narrow(1, time - tail, tail); };
  const torch::Tensor h = last(input) + Project(y * m.g, output_);
  if (keep == 0) {
    rows.tensors[kFfnShift] = ln2_->forward(h).select(1, tail - 1).clone();
    return h.narrow(1, 0, 0);
  }
  const bool whole_chunk = tail == time;
  torch::Tensor shift = whole_chunk ? rows.tensors[kFfnShift] : torch::Tensor();
  // With every output wanted, b is computed at every position: a rollback
  // can keep any prefix. The tensors are the chunk's own, referenced.
  const bool keep_updates = carry.updates != nullptr && keep == time;
  torch::Tensor normed;
  torch::Tensor out = ChannelMix(h, shift, keep_updates ? &normed : nullptr);
  rows.tensors[kFfnShift] = shift.clone();
  if (keep_updates) *carry.updates = {a, m.w, m.k, m.v, m.kk, m.iclr, normed};
  return out.narrow(1, out.size(1) - keep, keep);
}

bool Rwkv7Impl::ReplayUpdates(const std::vector<torch::Tensor>& updates, MixerState& state,
                              const torch::Tensor& slots, int64_t count) const {
  if (updates.size() != kKeptCount) return false;
  const int64_t batch = updates[kKeptA].size(0), time = updates[kKeptA].size(1);
  TORCH_CHECK(count >= 0 && count <= time, "rwkv7: replaying ", count, " positions of a chunk of ",
              time);
  if (count == 0) {
    ResolveSlots(state, slots, batch);  // the same checks
    return true;
  }
  auto prefix = [&](size_t i) { return updates[i].narrow(1, 0, count).contiguous(); };
  Mixed m;  // tail 0: the update alone, no outputs
  m.w = prefix(kKeptW);
  m.k = prefix(kKeptK);
  m.v = prefix(kKeptV);
  m.kk = prefix(kKeptKk);
  m.iclr = prefix(kKeptIclr);
  const RowAccess access = CanFuse(m.k, state) ? RowAccess::kFusedCpu : RowAccess::kGathered;
  ContinueRows(state, slots, batch, count, access, [&](BlockRows& rows) {
    if (rows.fused()) {
      kernels::Rwkv7UpdateArgs args;
      args.batch = batch;
      args.time = count;
      args.heads = options_.heads;
      args.head_dim = head_size();
      args.first_output = count;
      args.slots = rows.ids;
      args.w = m.w.data_ptr<float>();
      args.k = m.k.data_ptr<float>();
      args.v = m.v.data_ptr<float>();
      args.kk = m.kk.data_ptr<float>();
      args.a = m.iclr.data_ptr<float>();
      args.s = rows.tensors[kWkv].data_ptr<float>();
      kernels::Rwkv7Update(args);
    } else {
      UpdateByOps(m, rows.tensors[kWkv]);
    }
    rows.tensors[kAttShift] = updates[kKeptA].select(1, count - 1);
    rows.tensors[kFfnShift] = updates[kKeptB].select(1, count - 1);
  });
  return true;
}

bool Rwkv7Impl::InPlaceWhenFused(size_t tensor) const { return tensor == kWkv; }

bool Rwkv7Impl::StepsPoolRowsOnGpu(const torch::Tensor& x, const MixerState& state) const {
  return CudaPoolStepApplies(x, state);
}

}  // namespace attn
