#include "model/mixers/aft.h"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "model/cuda/state_kernels.h"
#include "model/kernels/kernels.h"
#include "model/layers/dense.h"
#include "model/mixers/block_helpers.h"

namespace attn {

// The recurrent state of a batch of rows during the parallel form. Unlike
// the slot layout of MixerState (ring slot = position mod S), the ring here
// holds only the keys that exist, in order: positions start-R .. start-1 with
// R = min(S, start). A sequence far shorter than S (aft-full) then costs what
// its length needs, not what max_context allows.
struct AftImpl::Sums {
  torch::Tensor c, num, den;  // [B, D]
  torch::Tensor ek, ekv;      // [B, R, D]
};

namespace {

bool AbsoluteBias(MixerKind kind) {
  return kind == MixerKind::kAftFull || kind == MixerKind::kAftLocal;
}

// The arguments the fused kernels share (kernels::AftStepArgs and
// AftPrefillArgs): sizes, the projections qkv [..., 3D] (Q, K, V side by
// side), the bias table [bias_heads, rows, window] (undefined for
// aft-simple), the output and the pool's state tensors in initial_state's
// order.
template <typename Args>
void FillSharedArgs(const torch::Tensor& qkv, const torch::Tensor& bias, const torch::Tensor& out,
                    int64_t window, int64_t bias_heads, MixerState& state, Args* args) {
  const int64_t d = out.size(-1);
  args->channels = d;
  args->window = window;
  args->bias_heads = bias_heads;
  args->bias_rows = bias.defined() ? bias.size(1) : 1;
  args->q = qkv.data_ptr<float>();
  args->k = args->q + d;
  args->v = args->q + 2 * d;
  args->bias = bias.defined() ? bias.data_ptr<float>() : nullptr;
  args->c = state.tensors[0].data_ptr<float>();
  args->num = state.tensors[1].data_ptr<float>();
  args->den = state.tensors[2].data_ptr<float>();
  args->ring_ek = state.tensors[3].data_ptr<float>();
  args->ring_ekv = state.tensors[4].data_ptr<float>();
  args->out = out.data_ptr<float>();
}

}  // namespace

int64_t AftWindow(const MixerOptions& o) {
  switch (o.kind) {
    case MixerKind::kAftSimple:
      return 0;
    case MixerKind::kAftFull:
      return o.max_context;
    default:
      return o.window;
  }
}

AftImpl::AftImpl(const MixerOptions& options)
    : SequenceMixer(options),
      window_(AftWindow(options)),
      bias_heads_(options.kind == MixerKind::kAftConv ? options.heads : 1) {
  const auto kind = options.kind;
  TORCH_CHECK(kind == MixerKind::kAftFull || kind == MixerKind::kAftLocal ||
                  kind == MixerKind::kAftSimple || kind == MixerKind::kAftConv,
              "Aft needs an aft-* kind");
  TORCH_CHECK(options.d_model % bias_heads_ == 0, "d_model (", options.d_model,
              ") must be divisible by heads (", bias_heads_, ")");
  TORCH_CHECK(kind == MixerKind::kAftSimple || window_ > 0, "window must be positive");
  TORCH_CHECK(!AbsoluteBias(kind) || options.max_context >= window_,
              "max_context must be at least the window");
  in_proj_ = register_module("in_proj", torch::nn::Linear(options.d_model, 3 * options.d_model));
  out_proj_ = register_module("out_proj", torch::nn::Linear(options.d_model, options.d_model));
  if (window_ > 0) {
    const int64_t rows = AbsoluteBias(kind) ? options.max_context : 1;
    // Zero bias starts as AFT-simple; training moves it.
    position_bias_ =
        register_parameter("position_bias", torch::zeros({bias_heads_, rows, window_}));
  }
}

int64_t AftImpl::max_context() const {
  return AbsoluteBias(options_.kind) ? options_.max_context : -1;
}

int64_t AftImpl::state_bytes_per_sequence(int64_t context) const {
  const int64_t ring = std::min(window_, context);
  return (3 + 2 * ring) * options_.d_model * static_cast<int64_t>(sizeof(float)) +
         static_cast<int64_t>(sizeof(int64_t));
}

MixerState AftImpl::initial_state(int64_t rows, torch::Device device) const {
  auto opts = torch::TensorOptions().device(device).dtype(torch::kFloat);
  const int64_t d = options_.d_model;
  MixerState state;
  state.length = torch::zeros({rows}, opts.dtype(torch::kLong));
  state.tensors = {
      torch::full({rows, d}, -std::numeric_limits<float>::infinity(), opts),  // c
      torch::zeros({rows, d}, opts),                                          // num
      torch::zeros({rows, d}, opts),                                          // den
      torch::zeros({rows, window_, d}, opts),                                 // ring exp(k-c)
      torch::zeros({rows, window_, d}, opts),                                 // ring exp(k-c)v
  };
  return state;
}

torch::Tensor AftImpl::BiasFactors(int64_t start, int64_t chunk, int64_t ring,
                                   const torch::TensorOptions& options) const {
  const int64_t s = window_;
  auto long_opts = options.dtype(torch::kLong);
  auto i = torch::arange(chunk, long_opts).unsqueeze(1);
  auto u = torch::arange(ring + chunk, long_opts).unsqueeze(0);
  auto delta = i + ring - u;  // t - t' for query i and key u (position start - ring + u)
  auto future = delta < 0;
  auto in_window = (delta >= 0) & (delta < s);
  auto factors = torch::ones({bias_heads_, chunk, ring + chunk}, options);
  if (s > 0) {
    auto table = position_bias_.to(options.dtype());
    auto rows = table.size(1) > 1 ? table.narrow(1, start, chunk)  // row(t) = t
                                  : table.expand({bias_heads_, chunk, s});
    auto index = delta.clamp(0, s - 1).unsqueeze(0).expand({bias_heads_, chunk, ring + chunk});
    auto bias = rows.gather(2, index);
    factors = torch::where(in_window.unsqueeze(0), bias.exp(), factors);
  }
  return factors.masked_fill(future.unsqueeze(0), 0.0);
}

torch::Tensor AftImpl::Block(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             int64_t start, Sums& sums) {
  const int64_t batch = q.size(0), chunk = q.size(1), d = q.size(2);
  const int64_t ring = sums.ek.size(1);
  const int64_t groups = bias_heads_, width = d / groups;
  // Each query's prefix maximum over every key it can see.
  auto m = torch::maximum(sums.c.unsqueeze(1), std::get<0>(k.cummax(1)));  // [B, C, D]
  auto carried_scale = torch::exp(sums.c.unsqueeze(1) - m);                // 0 when c = -inf
  auto num = carried_scale * sums.num.unsqueeze(1);
  auto den = carried_scale * sums.den.unsqueeze(1);
  auto factors = BiasFactors(start, chunk, ring, q.options());  // [G, C, R + C]
  if (ring > 0) {
    auto ring_factors = factors.narrow(2, 0, ring).unsqueeze(0);  // [1, G, C, R]
    auto grouped = [&](const torch::Tensor& keys) {
      auto r = keys.view({batch, ring, groups, width}).permute({0, 2, 1, 3});  // [B, G, R, W]
      return torch::matmul(ring_factors, r).permute({0, 2, 1, 3}).reshape({batch, chunk, d});
    };
    num = num + carried_scale * grouped(sums.ekv);
    den = den + carried_scale * grouped(sums.ek);
  }
  // Keys of this block: exp(k_j - m_i) for j <= i (clamped so the masked
  // future cannot overflow), times the bias factor of their head.
  auto chunk_factors = factors.narrow(2, ring, chunk).permute({1, 2, 0});  // [C, C, G]
  chunk_factors = chunk_factors.unsqueeze(-1)
                      .expand({chunk, chunk, groups, width})
                      .reshape({1, chunk, chunk, d});
  auto weights = torch::exp((k.unsqueeze(1) - m.unsqueeze(2)).clamp_max(0.0)) * chunk_factors;
  num = num + (weights * v.unsqueeze(1)).sum(2);
  den = den + weights.sum(2);
  auto y = torch::sigmoid(q) * num / den;

  // Advance the state past this block, rescaled to the new running max: the
  // oldest keys beyond the window join the carried sums, the last S stay.
  auto c_new = m.select(1, chunk - 1);
  auto rescale = torch::exp(sums.c - c_new).unsqueeze(1);  // [B, 1, D]
  auto ek_chunk = torch::exp(k - c_new.unsqueeze(1));
  auto ek_all = torch::cat({sums.ek * rescale, ek_chunk}, 1);
  auto ekv_all = torch::cat({sums.ekv * rescale, ek_chunk * v}, 1);
  const int64_t keep = std::min(window_, ring + chunk);
  const int64_t evicted = ring + chunk - keep;
  sums.num = sums.num * rescale.squeeze(1) + ekv_all.narrow(1, 0, evicted).sum(1);
  sums.den = sums.den * rescale.squeeze(1) + ek_all.narrow(1, 0, evicted).sum(1);
  sums.ek = ek_all.narrow(1, evicted, keep);
  sums.ekv = ekv_all.narrow(1, evicted, keep);
  sums.c = c_new;
  return y;
}

torch::Tensor AftImpl::Blocks(const torch::Tensor& x, int64_t start, Sums& sums) {
  auto qkv = Dense(x, in_proj_).chunk(3, -1);
  const int64_t time = x.size(1);
  std::vector<torch::Tensor> outputs;
  for (int64_t begin = 0; begin < time; begin += options_.chunk) {
    const int64_t len = std::min(options_.chunk, time - begin);
    outputs.push_back(Block(qkv[0].narrow(1, begin, len), qkv[1].narrow(1, begin, len),
                            qkv[2].narrow(1, begin, len), start + begin, sums));
  }
  return Dense(torch::cat(outputs, 1), out_proj_);
}

torch::Tensor AftImpl::forward(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == options_.d_model, "expected x [B, T, ", options_.d_model,
              "], got ", x.sizes());
  TORCH_CHECK(max_context() < 0 || x.size(1) <= max_context(), MixerKindName(options_.kind),
              " handles at most ", max_context(), " tokens, got ", x.size(1));
  const int64_t batch = x.size(0), d = options_.d_model;
  auto opts = x.options();
  Sums sums{torch::full({batch, d}, -std::numeric_limits<double>::infinity(), opts),
            torch::zeros({batch, d}, opts), torch::zeros({batch, d}, opts),
            torch::zeros({batch, 0, d}, opts), torch::zeros({batch, 0, d}, opts)};
  return Blocks(x, 0, sums);
}

torch::Tensor AftImpl::FusedPrefill(const torch::Tensor& x, MixerState& state,
                                    const torch::Tensor& rows, int64_t start, int64_t keep) {
  const int64_t batch = x.size(0), time = x.size(1), d = options_.d_model;
  auto qkv = DenseLeadingColumnsForLast(x, in_proj_, d, keep).contiguous();  // [B, T, 3D]
  auto out = torch::empty({batch, keep, d}, x.options());
  torch::Tensor bias = window_ > 0 ? position_bias_.contiguous() : torch::Tensor();
  kernels::AftPrefillArgs args;
  FillSharedArgs(qkv, bias, out, window_, bias_heads_, state, &args);
  args.batch = batch;
  args.time = time;
  args.block = options_.chunk;
  args.start = start;
  args.slots = rows.data_ptr<int64_t>();
  args.row_stride = time * 3 * d;
  args.token_stride = 3 * d;
  args.first_output = time - keep;
  kernels::AftPrefill(args);
  state.length.index_fill_(0, rows, start + time);
  return Dense(out, out_proj_);
}

torch::Tensor AftImpl::Prefill(const torch::Tensor& x, MixerState& state,
                               const torch::Tensor& slots, int64_t keep) {
  auto rows = ResolveSlots(state, slots, x.size(0));
  CheckCapacity(state, rows, x.size(1));
  const int64_t start = CommonLength(state, rows);
  if (CanFuse(x, state)) return FusedPrefill(x.contiguous(), state, rows, start, keep);
  auto index = RowsOn(rows, x.device());
  auto held = GatherWindowRows(state, index, window_, start);
  Sums sums{held[0], held[1], held[2], held[3], held[4]};
  auto y = Blocks(x, start, sums);
  ScatterWindowRows(state, index, window_, start + x.size(1),
                    {sums.c, sums.num, sums.den, sums.ek, sums.ekv});
  state.length.index_fill_(0, RowsOn(rows, state.length.device()), start + x.size(1));
  return y.narrow(1, x.size(1) - keep, keep);
}

torch::Tensor AftImpl::step(const torch::Tensor& x, MixerState& state, const torch::Tensor& slots) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) == options_.d_model, "step expects x [B, ",
              options_.d_model, "], got ", x.sizes());
  if (!CanFuse(x, state)) return StepByOps(x, state, slots);
  const int64_t batch = x.size(0), d = options_.d_model;
  torch::Tensor slot_holder;
  const int64_t* slot_ids = PrepareFusedStep(state, slots, batch, &slot_holder);
  auto qkv = Dense(x, in_proj_).contiguous();
  auto out = torch::empty({batch, d}, x.options());
  torch::Tensor bias = window_ > 0 ? position_bias_.contiguous() : torch::Tensor();
  kernels::AftStepArgs args;
  FillSharedArgs(qkv, bias, out, window_, bias_heads_, state, &args);
  args.batch = batch;
  args.slots = slot_ids;
  args.lengths = state.length.data_ptr<int64_t>();
  args.stride = 3 * d;
  kernels::AftStep(args);
  kernels::AdvanceLengths(batch, args.slots, state.length.data_ptr<int64_t>());
  return Dense(out, out_proj_);
}

std::pair<torch::Tensor, torch::Tensor> AftImpl::StepFactors(
    const torch::Tensor& t, int64_t span, const torch::TensorOptions& options) const {
  const int64_t batch = t.size(0), s = window_, d = options_.d_model;
  const int64_t groups = bias_heads_, width = d / groups;
  const auto table = position_bias_.to(options.dtype());  // [G, rows, S]
  // A row past the table (a CUDA graph's spare row, which runs on past the
  // context) reads the last row, as the kernel does.
  const auto rows = table.size(1) > 1 ? table.index_select(1, t.clamp_max(table.size(1) - 1))
                                      : table.expand({groups, batch, s});  // [G, B, S]
  // Slot j holds the key of the position p in [t - S, t) with p = j mod S:
  // delta = t - p in 1..S, and the slot holds nothing yet where p < 0.
  const auto j = torch::arange(span, t.options()).view({1, span});
  const auto delta = (t.view({-1, 1}) - 1 - j).remainder(s) + 1;  // [B, span]
  const auto index = delta.clamp_max(s - 1).unsqueeze(0).expand({groups, batch, span});
  auto ring =
      torch::where((delta < s).unsqueeze(0), rows.gather(2, index).exp(), torch::ones({1}, options))
          .masked_fill((delta > t.view({-1, 1})).unsqueeze(0), 0.0);
  auto to_channels = [&](const torch::Tensor& by_group, std::vector<int64_t> lead) {
    auto shape = lead;
    shape.push_back(groups);
    shape.push_back(width);
    lead.push_back(d);
    return by_group.unsqueeze(-1).expand(shape).reshape(lead);
  };
  return {to_channels(ring.permute({1, 2, 0}), {batch, span}),
          to_channels(rows.select(2, 0).exp().t(), {batch})};
}

torch::Tensor AftImpl::StepByOps(const torch::Tensor& x, MixerState& state,
                                 const torch::Tensor& slots) {
  const torch::Tensor rows = ResolveSlots(state, slots, x.size(0));
  CheckCapacity(state, rows, 1);
  if (torch::Tensor y = StepOnGpu(x, state, rows); y.defined()) return y;
  const int64_t batch = x.size(0);
  const auto index = RowsOn(rows, x.device());
  const auto t = state.length.index_select(0, RowsOn(rows, state.length.device())).to(x.device());
  const auto qkv = Dense(x, in_proj_).chunk(3, -1);
  const auto &q = qkv[0], &k = qkv[1], &v = qkv[2];
  // Rows short of the window hold keys only in the slots below their
  // length: a window of max_context (aft-full) is gathered as far as the
  // longest row reaches, not whole.
  const int64_t span = std::min(window_, t.max().item<int64_t>() + 1);
  std::array<torch::Tensor, 5> held;
  for (int i = 0; i < 5; ++i) {
    held[i] =
        (i < 3 ? state.tensors[i] : state.tensors[i].narrow(1, 0, span)).index_select(0, index);
  }
  const auto m = torch::maximum(held[0], k);
  const auto scale = torch::exp(held[0] - m);  // 0 for a fresh row (c = -inf)
  const auto ek = torch::exp(k - m);
  auto carried_num = held[1], carried_den = held[2], own = torch::ones_like(k);
  auto num = held[1] * scale, den = held[2] * scale;  // the state's sums, rescaled to m
  if (window_ > 0) {
    auto [ring, own_factors] = StepFactors(t, span, x.options());
    carried_num = carried_num + (ring * held[4]).sum(1);
    carried_den = carried_den + (ring * held[3]).sum(1);
    own = own_factors;
    // Slot t mod S: the key at t - S (if any) leaves the ring for the sums,
    // and the new key takes its place.
    const auto ring_rows = torch::arange(batch, t.options()), slot = t.remainder(window_);
    const auto leaves = (t >= window_).unsqueeze(1);
    held[3] = held[3] * scale.unsqueeze(1);
    held[4] = held[4] * scale.unsqueeze(1);
    const auto zero = torch::zeros({1}, x.options());
    num = num + torch::where(leaves, held[4].index({ring_rows, slot}), zero);
    den = den + torch::where(leaves, held[3].index({ring_rows, slot}), zero);
    held[3].index_put_({ring_rows, slot}, ek);
    held[4].index_put_({ring_rows, slot}, ek * v);
  } else {
    num = num + ek * v;
    den = den + ek;
  }
  const auto y =
      torch::sigmoid(q) * (scale * carried_num + ek * own * v) / (scale * carried_den + ek * own);
  held[0] = m;
  held[1] = num;
  held[2] = den;
  for (int i = 0; i < 5; ++i) {
    (i < 3 ? state.tensors[i] : state.tensors[i].narrow(1, 0, span)).index_copy_(0, index, held[i]);
  }
  AdvanceRows(state, rows, 1);
  return Dense(y, out_proj_);
}

torch::Tensor AftImpl::StepOnGpu(const torch::Tensor& x, MixerState& state,
                                 const torch::Tensor& rows) {
  if (!CudaPoolStepApplies(x, state)) return {};
  const int64_t batch = x.size(0), d = options_.d_model;
  const auto qkv = Dense(x, in_proj_).contiguous();
  const auto bias = window_ > 0 ? position_bias_.contiguous() : torch::Tensor();
  const auto slots = RowsOn(rows, x.device());
  auto out = torch::empty({batch, d}, x.options());
  cuda::AftStepArgs args;
  FillSharedArgs(qkv, bias, out, window_, bias_heads_, state, &args);
  args.batch = batch;
  args.stride = 3 * d;
  args.slots = slots.data_ptr<int64_t>();
  args.lengths = state.length.data_ptr<int64_t>();
  RunPoolStep(state, slots, "aft", [&](void* stream) { return cuda::AftStep(args, stream); });
  return Dense(out, out_proj_);
}

}  // namespace attn
