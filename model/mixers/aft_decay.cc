#include "model/mixers/aft_decay.h"

#include <torch/torch.h>

#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "model/cuda/state_kernels.h"
#include "model/kernels/kernels.h"
#include "model/layers/dense.h"
#include "model/mixers/block_helpers.h"

namespace attn {

// The recurrent state of a batch of rows during the parallel form: the
// carried sums and the keys and values that are still inside the window,
// oldest first (unlike the slot layout of MixerState, only those that exist).
struct AftDecayImpl::Sums {
  torch::Tensor ref, num, den;  // [B, D]
  torch::Tensor k, v;           // [B, R, D], R = min(s, tokens so far)
};

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// softplus^-1(lambda) for channels log-spaced from 2e-4 to 1 inside each
// head: every head starts with channels that forget within a few tokens and
// channels that still see keys thousands of tokens back (exp(-0.2) at 1000).
torch::Tensor InitialDecayLogits(int64_t d_model, int64_t heads) {
  const int64_t width = d_model / heads;
  auto fraction = torch::arange(width, torch::kDouble) / std::max<int64_t>(1, width - 1);
  auto lambda = torch::exp(std::log(2e-4) + fraction * (std::log(1.0) - std::log(2e-4)));
  return torch::log(torch::expm1(lambda)).repeat({heads}).to(torch::kFloat);
}

}  // namespace

AftDecayImpl::AftDecayImpl(const MixerOptions& options) : SequenceMixer(options) {
  TORCH_CHECK(options.kind == MixerKind::kAftDecay, "AftDecay needs the aft-decay kind");
  TORCH_CHECK(options.window > 0, "aft-decay needs a window of at least 1, got ", options.window);
  TORCH_CHECK(options.d_model % options.heads == 0, "d_model (", options.d_model,
              ") must be divisible by heads (", options.heads, ")");
  in_proj_ = register_module("in_proj", torch::nn::Linear(options.d_model, 3 * options.d_model));
  out_proj_ = register_module("out_proj", torch::nn::Linear(options.d_model, options.d_model));
  // Zero filter: inside the window every key starts at weight exp(0), as AFT-conv does.
  position_bias_ =
      register_parameter("position_bias", torch::zeros({options.heads, options.window}));
  decay_logit_ =
      register_parameter("decay_logit", InitialDecayLogits(options.d_model, options.heads));
}

torch::Tensor AftDecayImpl::decay_factor() const {
  return torch::exp(-torch::softplus(decay_logit_));
}

int64_t AftDecayImpl::state_bytes_per_sequence(int64_t context) const {
  const int64_t ring = std::min(options_.window, context);
  return (3 + 2 * ring) * options_.d_model * static_cast<int64_t>(sizeof(float)) +
         static_cast<int64_t>(sizeof(int64_t));
}

MixerState AftDecayImpl::initial_state(int64_t rows, torch::Device device) const {
  auto opts = torch::TensorOptions().device(device).dtype(torch::kFloat);
  const int64_t d = options_.d_model, s = options_.window;
  MixerState state;
  state.length = torch::zeros({rows}, opts.dtype(torch::kLong));
  state.tensors = {
      torch::full({rows, d}, -kInf, opts),  // ref
      torch::zeros({rows, d}, opts),        // num
      torch::zeros({rows, d}, opts),        // den
      torch::zeros({rows, s, d}, opts),     // ring of keys
      torch::zeros({rows, s, d}, opts),     // ring of values
  };
  return state;
}

torch::Tensor AftDecayImpl::Block(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, const torch::Tensor& lambda,
                                  const torch::Tensor& filter, Sums& sums) const {
  const int64_t chunk = q.size(1), d = q.size(2), s = options_.window;
  const int64_t ring = sums.k.size(1), span = ring + chunk;
  auto keys = torch::cat({sums.k, k}, 1);  // [B, R + C, D], oldest first
  auto values = torch::cat({sums.v, v}, 1);
  auto long_opts = q.options().dtype(torch::kLong);
  auto delta = torch::arange(chunk, long_opts).unsqueeze(1) + ring -
               torch::arange(span, long_opts).unsqueeze(0);  // t - t' [C, R + C]
  auto near = filter.index_select(0, delta.clamp(0, s - 1).flatten()).view({chunk, span, d});
  auto far = (delta - s).clamp_min(0).to(q.dtype()).unsqueeze(-1) * -lambda;
  auto w = torch::where((delta < s).unsqueeze(-1), near, far);  // [C, R + C, D]
  auto logits = (keys.unsqueeze(1) + w.unsqueeze(0))
                    .masked_fill((delta < 0).view({1, chunk, span, 1}), -kInf);
  // The carried sums as query i sees them: i + 1 steps older.
  auto steps = torch::arange(1, chunk + 1, q.options()).unsqueeze(-1);
  auto carried_ref = sums.ref.unsqueeze(1) - steps.unsqueeze(0) * lambda;  // [B, C, D]
  // Any reference gives the same ratio: the largest exponent, held constant
  // for autograd, keeps every term at most 1.
  auto m = torch::maximum(std::get<0>(logits.max(2)), carried_ref).detach();
  auto weights = torch::exp(logits - m.unsqueeze(2));
  auto carried = torch::exp(carried_ref - m);  // 0 while nothing has left the window
  auto num = (weights * values.unsqueeze(1)).sum(2) + carried * sums.num.unsqueeze(1);
  auto den = weights.sum(2) + carried * sums.den.unsqueeze(1);
  auto y = torch::sigmoid(q) * num / den;

  // Past the block: keys further than s before its last query join the sums.
  const int64_t keep = std::min(s, span), evicted = span - keep;
  auto aged_ref = sums.ref - static_cast<double>(chunk) * lambda;
  if (evicted > 0) {
    auto distance = (chunk - 1 + ring - s) - torch::arange(evicted, long_opts);  // t - t' - s
    auto joining =
        keys.narrow(1, 0, evicted) - distance.to(q.dtype()).unsqueeze(-1) * lambda;  // [B, E, D]
    auto new_ref = torch::maximum(aged_ref, std::get<0>(joining.max(1))).detach();
    auto old_scale = torch::exp(aged_ref - new_ref);
    auto e = torch::exp(joining - new_ref.unsqueeze(1));
    sums.num = sums.num * old_scale + (e * values.narrow(1, 0, evicted)).sum(1);
    sums.den = sums.den * old_scale + e.sum(1);
    sums.ref = new_ref;
  } else {
    sums.ref = aged_ref.detach();
  }
  sums.k = keys.narrow(1, evicted, keep);
  sums.v = values.narrow(1, evicted, keep);
  return y;
}

torch::Tensor AftDecayImpl::Blocks(const torch::Tensor& x, Sums& sums) {
  auto qkv = Dense(x, in_proj_).chunk(3, -1);
  const int64_t time = x.size(1);
  // Once per call, not per block: lambda [D] and the filter u_h(d)[delta] as [s, D].
  auto lambda = -torch::log(decay_factor()).to(x.dtype());
  auto filter = WindowFilter(x.scalar_type());
  std::vector<torch::Tensor> outputs;
  for (int64_t begin = 0; begin < time; begin += options_.chunk) {
    const int64_t len = std::min(options_.chunk, time - begin);
    outputs.push_back(Block(qkv[0].narrow(1, begin, len), qkv[1].narrow(1, begin, len),
                            qkv[2].narrow(1, begin, len), lambda, filter, sums));
  }
  return Dense(torch::cat(outputs, 1), out_proj_);
}

torch::Tensor AftDecayImpl::WindowFilter(torch::ScalarType dtype) const {
  const int64_t s = options_.window, d = options_.d_model;
  return position_bias_.to(dtype)
      .t()
      .unsqueeze(-1)
      .expand({s, options_.heads, d / options_.heads})
      .reshape({s, d});
}

torch::Tensor AftDecayImpl::forward(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == options_.d_model, "expected x [B, T, ", options_.d_model,
              "], got ", x.sizes());
  const int64_t batch = x.size(0), d = options_.d_model;
  auto opts = x.options();
  Sums sums{torch::full({batch, d}, -kInf, opts), torch::zeros({batch, d}, opts),
            torch::zeros({batch, d}, opts), torch::zeros({batch, 0, d}, opts),
            torch::zeros({batch, 0, d}, opts)};
  return Blocks(x, sums);
}

torch::Tensor AftDecayImpl::Fused(const torch::Tensor& x, MixerState& state, const int64_t* rows,
                                  int64_t keep) {
  const bool one_token = x.dim() == 2;
  const int64_t batch = x.size(0), time = one_token ? 1 : x.size(1), d = options_.d_model;
  auto qkv = (one_token ? Dense(x, in_proj_) : DenseLeadingColumnsForLast(x, in_proj_, d, keep))
                 .contiguous();
  auto out = torch::empty(
      one_token ? std::vector<int64_t>{batch, d} : std::vector<int64_t>{batch, keep, d},
      x.options());
  auto decay = decay_factor().contiguous();
  auto bias = position_bias_.contiguous();
  kernels::AftDecayArgs args;
  args.batch = batch;
  args.time = time;
  args.channels = d;
  args.window = options_.window;
  args.heads = options_.heads;
  args.slots = rows;
  args.lengths = state.length.data_ptr<int64_t>();
  args.q = qkv.data_ptr<float>();
  args.k = args.q + d;
  args.v = args.q + 2 * d;
  args.row_stride = time * 3 * d;
  args.token_stride = 3 * d;
  args.bias = bias.data_ptr<float>();
  args.decay = decay.data_ptr<float>();
  args.ref = state.tensors[0].data_ptr<float>();
  args.num = state.tensors[1].data_ptr<float>();
  args.den = state.tensors[2].data_ptr<float>();
  args.ring_k = state.tensors[3].data_ptr<float>();
  args.ring_v = state.tensors[4].data_ptr<float>();
  args.first_output = time - keep;
  args.out = out.data_ptr<float>();
  kernels::AftDecay(args);
  int64_t* lengths = state.length.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) lengths[rows ? rows[b] : b] += time;
  return Dense(out, out_proj_);
}

torch::Tensor AftDecayImpl::Prefill(const torch::Tensor& x, MixerState& state,
                                    const torch::Tensor& slots, int64_t keep) {
  auto rows = ResolveSlots(state, slots, x.size(0));
  const int64_t start = CommonLength(state, rows);
  if (CanFuse(x, state)) return Fused(x.contiguous(), state, rows.data_ptr<int64_t>(), keep);
  auto index = RowsOn(rows, x.device());
  auto held = GatherWindowRows(state, index, options_.window, start);
  Sums sums{held[0], held[1], held[2], held[3], held[4]};
  auto y = Blocks(x, sums);
  ScatterWindowRows(state, index, options_.window, start + x.size(1),
                    {sums.ref, sums.num, sums.den, sums.k, sums.v});
  state.length.index_fill_(0, RowsOn(rows, state.length.device()), start + x.size(1));
  return y.narrow(1, x.size(1) - keep, keep);
}

torch::Tensor AftDecayImpl::step(const torch::Tensor& x, MixerState& state,
                                 const torch::Tensor& slots) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) == options_.d_model, "step expects x [B, ",
              options_.d_model, "], got ", x.sizes());
  if (!CanFuse(x, state)) return StepByOps(x, state, slots);
  torch::Tensor slot_holder;
  const int64_t* rows = PrepareFusedStep(state, slots, x.size(0), &slot_holder);
  return Fused(x.contiguous(), state, rows, /*keep=*/1);
}

// Block's arithmetic for one token per row, each at its own position t: the
// ring's slot j holds the key and value of the position p in [t - s, t)
// with p = j mod s (none yet where p < 0), at distance delta = t - p.
torch::Tensor AftDecayImpl::StepByOps(const torch::Tensor& x, MixerState& state,
                                      const torch::Tensor& slots) {
  const torch::Tensor rows = ResolveSlots(state, slots, x.size(0));
  if (torch::Tensor y = StepOnGpu(x, state, rows); y.defined()) return y;
  const int64_t batch = x.size(0), s = options_.window, d = options_.d_model;
  const auto index = RowsOn(rows, x.device());
  const auto t = state.length.index_select(0, RowsOn(rows, state.length.device())).to(x.device());
  const auto qkv = Dense(x, in_proj_).chunk(3, -1);
  const auto &q = qkv[0], &k = qkv[1], &v = qkv[2];
  std::array<torch::Tensor, 5> held;  // ref, num, den, ring of keys, ring of values
  for (int i = 0; i < 5; ++i) held[i] = state.tensors[i].index_select(0, index);
  const auto lambda = -torch::log(decay_factor()).to(x.dtype());
  const auto filter = WindowFilter(x.scalar_type());  // [s, D]
  const auto j = torch::arange(s, t.options()).view({1, s});
  const auto delta = (t.view({-1, 1}) - 1 - j).remainder(s) + 1;  // [B, s], 1..s
  // w = u[delta] inside the window; the key at delta = s is at its edge, w = 0.
  const auto near = filter.index_select(0, delta.clamp_max(s - 1).flatten()).view({batch, s, d});
  const auto ring_logits =
      (held[3] + near.masked_fill((delta == s).unsqueeze(-1), 0.0))
          .masked_fill((delta > t.view({-1, 1})).unsqueeze(-1), -kInf);  // [B, s, D]
  const auto own_logit = k + filter[0];
  const auto carried_ref = held[0] - lambda;  // the carried sums, one step older
  const auto m =
      torch::maximum(torch::maximum(std::get<0>(ring_logits.max(1)), own_logit), carried_ref)
          .detach();
  const auto weights = torch::exp(ring_logits - m.unsqueeze(1));
  const auto own = torch::exp(own_logit - m), carried = torch::exp(carried_ref - m);
  const auto y = torch::sigmoid(q) * ((weights * held[4]).sum(1) + own * v + carried * held[1]) /
                 (weights.sum(1) + own + carried * held[2]);
  // Slot t mod s: the key at t - s (if any) joins the sums at weight
  // exp(key) (its distance past the window is 0), and the new key takes
  // its place.
  const auto ring_rows = torch::arange(batch, t.options()), slot = t.remainder(s);
  const auto leaves = (t >= s).unsqueeze(1);
  const auto joining = held[3].index({ring_rows, slot});
  const auto new_ref = torch::where(leaves, torch::maximum(carried_ref, joining), carried_ref);
  const auto old_scale = torch::exp(carried_ref - new_ref), e = torch::exp(joining - new_ref);
  held[1] =
      torch::where(leaves, held[1] * old_scale + e * held[4].index({ring_rows, slot}), held[1]);
  held[2] = torch::where(leaves, held[2] * old_scale + e, held[2]);
  held[0] = new_ref.detach();
  held[3].index_put_({ring_rows, slot}, k);
  held[4].index_put_({ring_rows, slot}, v);
  for (int i = 0; i < 5; ++i) state.tensors[i].index_copy_(0, index, held[i]);
  AdvanceRows(state, rows, 1);
  return Dense(y, out_proj_);
}

torch::Tensor AftDecayImpl::StepOnGpu(const torch::Tensor& x, MixerState& state,
                                      const torch::Tensor& rows) {
  if (!CudaPoolStepApplies(x, state)) return {};
  auto& t = state.tensors;
  const int64_t batch = x.size(0), d = options_.d_model;
  const auto qkv = Dense(x, in_proj_).contiguous();
  const auto decay = decay_factor().contiguous(), bias = position_bias_.contiguous();
  const auto slots = RowsOn(rows, x.device());
  auto out = torch::empty({batch, d}, x.options());
  cuda::AftDecayStepArgs args;
  args.batch = batch;
  args.channels = d;
  args.heads = options_.heads;
  args.window = options_.window;
  args.qkv = qkv.data_ptr<float>();
  args.decay = decay.data_ptr<float>();
  args.bias = bias.data_ptr<float>();
  args.slots = slots.data_ptr<int64_t>();
  args.lengths = state.length.data_ptr<int64_t>();
  args.ref = t[0].data_ptr<float>();
  args.num = t[1].data_ptr<float>();
  args.den = t[2].data_ptr<float>();
  args.ring_k = t[3].data_ptr<float>();
  args.ring_v = t[4].data_ptr<float>();
  args.out = out.data_ptr<float>();
  RunPoolStep(state, slots, "aft-decay",
              [&](void* stream) { return cuda::AftDecayStep(args, stream); });
  return Dense(out, out_proj_);
}

}  // namespace attn
