#include "model/mixers/rwkv4.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "model/cuda/state_kernels.h"
#include "model/kernels/kernels.h"
#include "model/mixers/block_helpers.h"

namespace attn {
namespace {

// previous + (current - previous) * mu: RWKV-4's interpolation, mu weighing
// the current token.
torch::Tensor Mix(const torch::Tensor& previous, const torch::Tensor& current,
                  const torch::Tensor& mu) {
  return torch::addcmul(previous, current - previous, mu);
}

// Runs `kernel` (kernels::Rwkv4Wkv on the CPU, cuda::Rwkv4Wkv on a GPU,
// whose arguments have the same fields) over k, v [B, T, C] and the rows'
// sums[0..2] (num, den, max: contiguous, updated in place); wkv of the last
// `tail` tokens, [B, tail, C].
template <typename Args, typename Kernel>
torch::Tensor RunWkv(const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& decay,
                     const torch::Tensor& first, torch::Tensor* sums, int64_t tail,
                     Kernel&& kernel) {
  const int64_t batch = k.size(0), time = k.size(1), c = k.size(2);
  const auto kc = k.contiguous(), vc = v.contiguous();
  const auto w = decay.contiguous(), u = first.contiguous();
  torch::Tensor out = torch::empty({batch, tail, c}, k.options());
  Args args;
  args.batch = batch;
  args.time = time;
  args.channels = c;
  args.first_output = time - tail;
  args.k = kc.data_ptr<float>();
  args.v = vc.data_ptr<float>();
  args.decay = w.data_ptr<float>();
  args.first = u.data_ptr<float>();
  args.num = sums[0].data_ptr<float>();
  args.den = sums[1].data_ptr<float>();
  args.max = sums[2].data_ptr<float>();
  args.out = out.data_ptr<float>();
  kernel(args);
  return out;
}

}  // namespace

Rwkv4Impl::Rwkv4Impl(const MixerOptions& options) : WholeBlockMixer(options) {
  TORCH_CHECK(options.kind == MixerKind::kRwkv4, "Rwkv4 needs kind rwkv4");
  TORCH_CHECK(options.ff_hidden > 0, "rwkv4: ff_hidden must be positive");
  TORCH_CHECK(options.rescale_every >= 0, "rwkv4: rescale_every must be at least 0");
  const int64_t c = options.d_model;
  auto linear = [&](const char* name, int64_t in, int64_t out) {
    return register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)));
  };
  // The RWKV-4 trainer's starting point, for a layer of an assumed 12-layer
  // model: decays spread from fast to slow across the channels, mixes that
  // lean on the current token more in deeper layers.
  const double depth = 12.0;
  const double to_one = std::min(1.0, static_cast<double>(options.layer) / (depth - 1));
  const double to_zero = 1.0 - std::min(1.0, static_cast<double>(options.layer) / depth);
  const auto ramp = torch::arange(c, torch::kFloat) / std::max<int64_t>(c - 1, 1);
  const auto fraction = torch::arange(c, torch::kFloat) / c;
  time_decay_ = register_parameter("time_decay", -5.0 + 8.0 * torch::pow(ramp, 0.7 + 1.3 * to_one));
  const auto zigzag = (torch::arange(c, torch::kFloat).remainder(3) - 1.0) * 0.5;
  time_first_ = register_parameter("time_first", std::log(0.3) + zigzag);
  mix_k_ = register_parameter("mix_k", torch::pow(fraction, to_zero));
  mix_v_ = register_parameter("mix_v", torch::pow(fraction, to_zero) + 0.3 * to_one);
  mix_r_ = register_parameter("mix_r", torch::pow(fraction, 0.5 * to_zero));
  ffn_mix_k_ = register_parameter("ffn_mix_k", torch::pow(fraction, to_zero));
  ffn_mix_r_ = register_parameter("ffn_mix_r", torch::pow(fraction, to_zero));
  key_ = linear("key", c, c);
  value_ = linear("value", c, c);
  receptance_ = linear("receptance", c, c);
  output_ = linear("output", c, c);
  ffn_key_ = linear("ffn_key", c, options.ff_hidden);
  ffn_receptance_ = linear("ffn_receptance", c, c);
  ffn_value_ = linear("ffn_value", options.ff_hidden, c);
  if (options.layer == 0) ln0_ = register_module("ln0", Norm(NormKind::kLayerNorm, c));
  ln1_ = register_module("ln1", Norm(NormKind::kLayerNorm, c));
  ln2_ = register_module("ln2", Norm(NormKind::kLayerNorm, c));
  // A new block passes its input through: both outputs start at zero.
  torch::NoGradGuard no_grad;
  output_->weight.zero_();
  ffn_value_->weight.zero_();
}

bool Rwkv4Impl::halves_output() const {
  return options_.rescale_every > 0 && (options_.layer + 1) % options_.rescale_every == 0;
}

int64_t Rwkv4Impl::state_bytes_per_sequence(int64_t /*context*/) const {
  return 5 * options_.d_model * static_cast<int64_t>(sizeof(float)) +
         static_cast<int64_t>(sizeof(int64_t));
}

MixerState Rwkv4Impl::initial_state(int64_t rows, torch::Device device) const {
  const auto opts = torch::TensorOptions().dtype(torch::kFloat).device(device);
  const int64_t c = options_.d_model;
  MixerState state;
  state.length = torch::zeros({rows}, opts.dtype(torch::kLong));
  state.tensors = {torch::zeros({rows, c}, opts), torch::zeros({rows, c}, opts),
                   torch::zeros({rows, c}, opts), torch::full({rows, c}, kRwkv4EmptyMax, opts),
                   torch::zeros({rows, c}, opts)};
  return state;
}

torch::Tensor Rwkv4Impl::WkvByOps(const torch::Tensor& k, const torch::Tensor& v,
                                  torch::Tensor& num, torch::Tensor& den, torch::Tensor& max,
                                  int64_t tail) const {
  const int64_t time = k.size(1);
  const auto w = -torch::exp(time_decay_);
  std::vector<torch::Tensor> outputs;
  for (int64_t t = 0; t < time; ++t) {
    const auto kt = k.select(1, t), vt = v.select(1, t);
    if (t >= time - tail) {
      const auto bonus = time_first_ + kt;
      const auto q = torch::maximum(max, bonus);
      const auto past = torch::exp(max - q), now = torch::exp(bonus - q);
      outputs.push_back((past * num + now * vt) / (past * den + now));
    }
    const auto decayed = max + w;
    const auto q = torch::maximum(decayed, kt);
    const auto past = torch::exp(decayed - q), now = torch::exp(kt - q);
    num = past * num + now * vt;
    den = past * den + now;
    max = q;
  }
  return torch::stack(outputs, 1);
}

torch::Tensor Rwkv4Impl::WkvOnGpu(const torch::Tensor& k, const torch::Tensor& v,
                                  torch::Tensor& num, torch::Tensor& den, torch::Tensor& max,
                                  int64_t tail) const {
  if (!CudaStepApplies({&k, &v, &num, &den, &max})) return {};
  // Copies, updated in place: a caller may hold the state before the chunk.
  std::vector<torch::Tensor> updated;
  for (const torch::Tensor* sum : {&num, &den, &max}) {
    updated.push_back(sum->clone(torch::MemoryFormat::Contiguous));
  }
  torch::Tensor out = RunWkv<cuda::Rwkv4WkvArgs>(
      k, v, -torch::exp(time_decay_), time_first_, updated.data(), tail,
      [&](const cuda::Rwkv4WkvArgs& args) {
        RunOnGpu(k.device(), "rwkv4's WKV",
                 [&](void* stream) { return cuda::Rwkv4Wkv(args, stream); });
      });
  num = updated[0], den = updated[1], max = updated[2];
  return out;
}

torch::Tensor Rwkv4Impl::Run(const torch::Tensor& x, BlockRows& block, int64_t keep,
                             LayerCarry& /*carry*/) {
  std::vector<torch::Tensor>& rows = block.tensors;
  const bool fused = block.fused();
  const int64_t time = x.size(1);
  const torch::Tensor input = options_.layer == 0 ? ln0_->forward(x) : x;
  const torch::Tensor a = ln1_->forward(input);
  const int64_t tail = OutputTail(time, keep);
  const auto previous = Shifted(a, rows[0]);
  const auto k = Project(Mix(previous, a, mix_k_), key_);
  const auto v = Project(Mix(previous, a, mix_v_), value_);
  auto last = [&](const torch::Tensor& t) { return t.narrow(1, time - tail, tail); };
  const auto r = torch::sigmoid(Project(Mix(last(previous), last(a), mix_r_), receptance_));
  rows[0] = a.select(1, time - 1).clone();
  torch::Tensor wkv;
  if (fused) {
    wkv = RunWkv<kernels::Rwkv4WkvArgs>(
        k, v, -torch::exp(time_decay_), time_first_, &rows[1], tail,
        [](const kernels::Rwkv4WkvArgs& args) { kernels::Rwkv4Wkv(args); });
  } else if (wkv = WkvOnGpu(k, v, rows[1], rows[2], rows[3], tail); !wkv.defined()) {
    wkv = WkvByOps(k, v, rows[1], rows[2], rows[3], tail);
  }
  const torch::Tensor h = last(input) + Project(r * wkv, output_);
  if (keep == 0) {
    rows[4] = ln2_->forward(h).select(1, tail - 1).clone();
    return h.narrow(1, 0, 0);
  }
  torch::Tensor shift = tail == time ? rows[4] : torch::Tensor();
  const ShiftedTail mix = ShiftTail(ln2_->forward(h), h, shift);
  rows[4] = shift.clone();
  const auto gate =
      torch::sigmoid(Project(Mix(mix.previous, mix.current, ffn_mix_r_), ffn_receptance_));
  const auto hidden = torch::relu(Project(Mix(mix.previous, mix.current, ffn_mix_k_), ffn_key_));
  torch::Tensor out = mix.residual + gate * Project(hidden.square(), ffn_value_);
  if (halves_output()) out = out * 0.5;
  return out.narrow(1, out.size(1) - keep, keep);
}

}  // namespace attn
