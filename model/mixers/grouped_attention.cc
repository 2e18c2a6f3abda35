#include "model/mixers/grouped_attention.h"

#include <torch/torch.h>

#include <cmath>

#include "model/layers/dense.h"
#include "model/mixers/kv_cache.h"
#include "model/mixers/multi_head_attention.h"

namespace attn {
namespace {

// a [.., Dh] rotated by angles whose cos and sin are [.., Dh / 2]
// (broadcast over a's other dims).
torch::Tensor Rotate(const torch::Tensor& a, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = a.size(-1) / 2;
  const auto first = a.narrow(-1, 0, half), second = a.narrow(-1, half, half);
  return torch::cat({first * cos - second * sin, second * cos + first * sin}, -1);
}

}  // namespace

GroupedAttentionImpl::GroupedAttentionImpl(const MixerOptions& options) : SequenceMixer(options) {
  TORCH_CHECK(options.kind == MixerKind::kGqa, "GroupedAttention needs kind gqa");
  kv_heads_ = options.kv_heads > 0 ? options.kv_heads : options.heads;
  TORCH_CHECK(options.heads % kv_heads_ == 0, "gqa: kv_heads (", kv_heads_, ") must divide heads (",
              options.heads, ")");
  head_dim_ = options.d_model / options.heads;
  TORCH_CHECK(!options.rope || head_dim_ % 2 == 0,
              "gqa: rotary positions need an even head size, got ", head_dim_);
  TORCH_CHECK(!options.rope || options.rope_theta > 1.0, "gqa: rope_theta must exceed 1, got ",
              options.rope_theta);
  const int64_t d = options.d_model, width = (options.heads + 2 * kv_heads_) * head_dim_;
  qkv_proj_ = register_module("qkv_proj",
                              torch::nn::Linear(torch::nn::LinearOptions(d, width).bias(false)));
  out_proj_ =
      register_module("out_proj", torch::nn::Linear(torch::nn::LinearOptions(d, d).bias(false)));
  if (options.qk_norm) {
    q_norm_ = register_module("q_norm", Norm(NormKind::kRmsNorm, head_dim_, options.norm_eps));
    k_norm_ = register_module("k_norm", Norm(NormKind::kRmsNorm, head_dim_, options.norm_eps));
  }
  if (options.rope) {
    inv_freq_ =
        torch::pow(options.rope_theta, -torch::arange(0, head_dim_, 2, torch::kDouble) / head_dim_);
  }
}

const torch::Tensor& GroupedAttentionImpl::InvFreqOn(torch::Device device) {
  if (device.is_cpu()) return inv_freq_;
  if (!inv_freq_device_.defined() || inv_freq_device_.device() != device) {
    inv_freq_device_ = inv_freq_.to(device);
  }
  return inv_freq_device_;
}

torch::Tensor GroupedAttentionImpl::Project(const torch::Tensor& x,
                                            const torch::Tensor& positions) {
  const int64_t heads = options_.heads, dq = heads * head_dim_, dkv = kv_heads_ * head_dim_;
  const auto qkv = Dense(x, qkv_proj_);
  if (!options_.rope && !options_.qk_norm) return qkv;
  auto lead = x.sizes().vec();
  lead.pop_back();
  auto shaped = [&](int64_t first, int64_t count, int64_t n) {
    auto shape = lead;
    shape.push_back(n);
    shape.push_back(head_dim_);
    return qkv.narrow(-1, first, count).reshape(shape);
  };
  torch::Tensor q = shaped(0, dq, heads), k = shaped(dq, dkv, kv_heads_);
  if (options_.qk_norm) {
    q = q_norm_->forward(q);
    k = k_norm_->forward(k);
  }
  if (!options_.rope) {
    return torch::cat({q.flatten(-2), k.flatten(-2), qkv.narrow(-1, dq + dkv, dkv)}, -1);
  }
  // Angles in float64 from the exact positions, on the positions' device
  // (a GPU step's stay there: a capturable step reads nothing back):
  // [.., 1, Dh / 2].
  const auto angles =
      positions.to(torch::kDouble).unsqueeze(-1).unsqueeze(-1) * InvFreqOn(positions.device());
  const auto cos = torch::cos(angles).to(x.device(), x.scalar_type());
  const auto sin = torch::sin(angles).to(x.device(), x.scalar_type());
  return torch::cat({Rotate(q, cos, sin).flatten(-2), Rotate(k, cos, sin).flatten(-2),
                     qkv.narrow(-1, dq + dkv, dkv)},
                    -1);
}

std::array<torch::Tensor, 3> GroupedAttentionImpl::Split(const torch::Tensor& qkv) const {
  const int64_t batch = qkv.size(0), time = qkv.size(1), heads = options_.heads;
  const int64_t dq = heads * head_dim_, dkv = kv_heads_ * head_dim_, group = heads / kv_heads_;
  auto part = [&](int64_t first, int64_t count, int64_t n) {
    return qkv.narrow(2, first, count).reshape({batch, time, n, head_dim_}).transpose(1, 2);
  };
  return {part(0, dq, heads), part(dq, dkv, kv_heads_).repeat_interleave(group, 1),
          part(dq + dkv, dkv, kv_heads_).repeat_interleave(group, 1)};
}

torch::Tensor GroupedAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t batch = x.size(0), time = x.size(1);
  auto [q, k, v] = Split(Project(x, torch::arange(time, torch::kLong)));
  const auto y = ScaledDotProductAttention(q, k, v, CausalBias(time, time, 0, q.options()),
                                           /*rows_may_be_all_masked=*/false);
  return Dense(y.transpose(1, 2).reshape({batch, time, options_.d_model}), out_proj_);
}

MixerState GroupedAttentionImpl::initial_state(int64_t rows, torch::Device device) const {
  return MakeKvCacheState(rows, kv_heads_, options_.max_context, head_dim_, device);
}

torch::Tensor GroupedAttentionImpl::Prefill(const torch::Tensor& x, MixerState& state,
                                            const torch::Tensor& slots, int64_t keep) {
  const torch::Tensor rows = ResolveSlots(state, slots, x.size(0));
  const int64_t batch = x.size(0), chunk = x.size(1), heads = options_.heads;
  CheckCapacity(state, rows, chunk);
  const int64_t start = CommonLength(state, rows);
  const auto qkv = Project(x, torch::arange(start, start + chunk, torch::kLong));
  if (CanFuse(x, state)) {
    return Dense(CachedAttentionPrefill(qkv.contiguous(), state, rows.data_ptr<int64_t>(), start,
                                        heads, nullptr, chunk - keep, kv_heads_),
                 out_proj_);
  }
  const int64_t dq = heads * head_dim_, dkv = kv_heads_ * head_dim_, group = heads / kv_heads_;
  auto cached = [&](int64_t first) {
    return qkv.narrow(2, first, dkv).reshape({batch, chunk, kv_heads_, head_dim_}).transpose(1, 2);
  };
  auto [keys, values] =
      AppendChunkToCache(state, RowsOn(rows, x.device()), start, cached(dq), cached(dq + dkv));
  // Queries chunk - keep.. sit at positions start + chunk - keep..
  const auto q = qkv.narrow(1, chunk - keep, keep)
                     .narrow(2, 0, dq)
                     .reshape({batch, keep, heads, head_dim_})
                     .transpose(1, 2);
  const auto y = ScaledDotProductAttention(
      q, keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1),
      CausalBias(keep, start + chunk, start + chunk - keep, q.options()), false);
  state.length.index_fill_(0, RowsOn(rows, state.length.device()), start + chunk);
  return Dense(y.transpose(1, 2).reshape({batch, keep, options_.d_model}), out_proj_);
}

torch::Tensor GroupedAttentionImpl::step(const torch::Tensor& x, MixerState& state,
                                         const torch::Tensor& slots) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) == options_.d_model, "step expects x [B, ",
              options_.d_model, "], got ", x.sizes());
  if (!CanFuse(x, state)) return StepByOps(x, state, slots);
  torch::Tensor holder;
  const int64_t* ids = PrepareFusedStep(state, slots, x.size(0), &holder);
  const torch::Tensor positions =
      ids == nullptr ? state.length.narrow(0, 0, x.size(0))
                     : state.length.index_select(0, torch::from_blob(const_cast<int64_t*>(ids),
                                                                     {x.size(0)}, torch::kLong));
  const auto qkv = Project(x, positions).contiguous();
  return Dense(CachedAttentionStep(qkv, state, ids, options_.heads, {}, kv_heads_), out_proj_);
}

torch::Tensor GroupedAttentionImpl::StepByOps(const torch::Tensor& x, MixerState& state,
                                              const torch::Tensor& slots) {
  const torch::Tensor rows = ResolveSlots(state, slots, x.size(0));
  CheckCapacity(state, rows, 1);
  if (CudaCachedStepApplies(x, state)) {
    // The positions stay on the device: nothing here waits for it.
    const auto positions = state.length.index_select(0, RowsOn(rows, state.length.device()));
    const auto qkv = Project(x, positions).contiguous();
    return Dense(CudaCachedStep(qkv, state, rows, options_.heads, kv_heads_), out_proj_);
  }
  const torch::Tensor positions = state.length.to(torch::kCPU).index_select(0, rows);
  const int64_t batch = x.size(0), heads = options_.heads;
  const int64_t dq = heads * head_dim_, dkv = kv_heads_ * head_dim_, group = heads / kv_heads_;
  const auto qkv = Project(x, positions);
  auto cached = AppendStepToCache(state, RowsOn(rows, x.device()), positions,
                                  qkv.narrow(1, dq, dkv).view({batch, kv_heads_, head_dim_}),
                                  qkv.narrow(1, dq + dkv, dkv).view({batch, kv_heads_, head_dim_}));
  const auto q = qkv.narrow(1, 0, dq).view({batch, heads, 1, head_dim_});
  const auto y =
      ScaledDotProductAttention(q, cached.keys.repeat_interleave(group, 1),
                                cached.values.repeat_interleave(group, 1), cached.mask, false);
  return Dense(y.reshape({batch, options_.d_model}), out_proj_);
}

void GroupedAttentionImpl::ResetSlots(MixerState& state, const torch::Tensor& slots) const {
  state.length.index_fill_(0, slots.to(state.length.device(), torch::kLong), 0);
}

void GroupedAttentionImpl::ReleaseSlots(MixerState& state, const torch::Tensor& slots) const {
  ResetSlots(state, slots);
  ReleaseRowPages(state, slots);
}

int64_t GroupedAttentionImpl::state_bytes_per_sequence(int64_t context) const {
  return KvCacheBytes(context, options_.max_context, kv_heads_ * head_dim_);
}

}  // namespace attn
