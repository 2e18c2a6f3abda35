#include "model/mixers/relative_attention.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "model/layers/dense.h"
#include "model/layers/heads.h"
#include "model/layers/positions.h"
#include "model/mixers/kv_cache.h"

namespace attn {

RelativeMultiHeadAttentionImpl::RelativeMultiHeadAttentionImpl(const MixerOptions& options)
    : SequenceMixer(options), head_dim_(options.d_model / options.heads) {
  TORCH_CHECK(options.d_model % options.heads == 0, "d_model (", options.d_model,
              ") must be divisible by heads (", options.heads, ")");
  const int64_t d = options.d_model;
  in_proj_ = register_module("in_proj", torch::nn::Linear(d, 3 * d));
  r_proj_ =
      register_module("r_proj", torch::nn::Linear(torch::nn::LinearOptions(d, d).bias(false)));
  out_proj_ = register_module("out_proj", torch::nn::Linear(d, d));
  u_ = register_parameter("u", torch::zeros({options.heads, head_dim_}));
  v_ = register_parameter("v", torch::zeros({options.heads, head_dim_}));
  distances_ = register_buffer(
      "distances", SinusoidalEmbedding(torch::arange(options.max_context, torch::kLong), d));
}

torch::Tensor RelativeMultiHeadAttentionImpl::ProjectedDistances(int64_t count) {
  TORCH_CHECK(count <= options_.max_context, "relative attention covers distances below ",
              options_.max_context);
  const auto& w = r_proj_->weight;
  if (torch::GradMode::is_enabled()) {
    return Dense(distances_.narrow(0, 0, count), r_proj_)
        .view({count, options_.heads, head_dim_})
        .permute({1, 0, 2});
  }
  // Without autograd, W_r R is computed once for every distance and reused
  // until W_r changes (another tensor, or an in-place write that bumps its
  // version), so a decode step does not pay O(L d^2) for it. Tensors made
  // under InferenceMode keep no version; such weights are not rewritten in
  // place once serving.
  const int64_t version = w.is_inference() ? 0 : static_cast<int64_t>(w._version());
  absl::MutexLock lock(&projected_mutex_);
  if (!projected_cache_.defined() || projected_version_ != version ||
      projected_data_ != w.data_ptr() || projected_cache_.device() != w.device()) {
    projected_cache_ = Dense(distances_, r_proj_)
                           .view({options_.max_context, options_.heads, head_dim_})
                           .permute({1, 0, 2})
                           .contiguous();
    projected_version_ = version;
    projected_data_ = w.data_ptr();
  }
  return projected_cache_.narrow(1, 0, count);
}

torch::Tensor RelativeMultiHeadAttentionImpl::Attend(const torch::Tensor& q, const torch::Tensor& k,
                                                     const torch::Tensor& v, int64_t offset) {
  const int64_t tq = q.size(2), tk = k.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
  auto content = torch::matmul(q + u_.view({1, -1, 1, head_dim_}), k.transpose(-2, -1));
  auto r = ProjectedDistances(tk).transpose(1, 2);                          // [H, Dh, distance]
  auto by_distance = torch::matmul(q + v_.view({1, -1, 1, head_dim_}), r);  // [B, H, Tq, Tk]
  // Relative shift: entry (i, j) takes distance offset + i - j.
  auto opts = torch::TensorOptions().device(q.device()).dtype(torch::kLong);
  auto distance = torch::arange(offset, offset + tq, opts).unsqueeze(1) -
                  torch::arange(tk, opts).unsqueeze(0);  // [Tq, Tk]
  auto future = distance < 0;
  auto index = distance.clamp(0, tk - 1).expand({q.size(0), q.size(1), tq, tk});
  auto position = by_distance.gather(3, index);
  auto scores =
      ((content + position) * scale).masked_fill(future, -std::numeric_limits<double>::infinity());
  auto y = torch::matmul(torch::softmax(scores, -1), v);
  return Dense(MergeHeads(y), out_proj_);
}

torch::Tensor RelativeMultiHeadAttentionImpl::forward(const torch::Tensor& x) {
  return forward_with_memory(x, {}).first;
}

std::pair<torch::Tensor, torch::Tensor> RelativeMultiHeadAttentionImpl::forward_with_memory(
    const torch::Tensor& x, const torch::Tensor& memory) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == options_.d_model, "expected x [B, T, ", options_.d_model,
              "], got ", x.sizes());
  const bool has_memory = memory.defined() && memory.size(1) > 0;
  auto context = has_memory ? torch::cat({memory.detach(), x}, 1) : x;
  TORCH_CHECK(context.size(1) <= options_.max_context, "memory plus segment (", context.size(1),
              ") exceeds max_context ", options_.max_context);
  // One product over the context: the segment's queries are its last rows'
  // (computing the memory's too costs less than a second product, and the
  // int8 copy of in_proj covers only the whole weight).
  const auto qkv = Dense(context, in_proj_).chunk(3, -1);
  const int64_t offset = context.size(1) - x.size(1);
  auto q = SplitHeads(qkv[0].narrow(1, offset, x.size(1)), options_.heads);
  auto y =
      Attend(q, SplitHeads(qkv[1], options_.heads), SplitHeads(qkv[2], options_.heads), offset);
  const int64_t keep = std::min(options_.mem_len, context.size(1));
  auto next_memory = context.narrow(1, context.size(1) - keep, keep).detach();
  return {y, next_memory};
}

MixerState RelativeMultiHeadAttentionImpl::initial_state(int64_t rows, torch::Device device) const {
  return MakeKvCacheState(rows, options_.heads, options_.max_context, head_dim_, device);
}

void RelativeMultiHeadAttentionImpl::ResetSlots(MixerState& state,
                                                const torch::Tensor& slots) const {
  // As MultiHeadAttention: positions past a row's length are never read.
  state.length.index_fill_(0, slots.to(state.length.device(), torch::kLong), 0);
}

void RelativeMultiHeadAttentionImpl::ReleaseSlots(MixerState& state,
                                                  const torch::Tensor& slots) const {
  ResetSlots(state, slots);
  ReleaseRowPages(state, slots);
}

torch::Tensor RelativeMultiHeadAttentionImpl::Prefill(const torch::Tensor& x, MixerState& state,
                                                      const torch::Tensor& slots, int64_t keep) {
  auto rows = ResolveSlots(state, slots, x.size(0));
  const int64_t chunk = x.size(1);
  CheckCapacity(state, rows, chunk);
  const int64_t start = CommonLength(state, rows);
  auto qkv = ProjectToHeads(in_proj_, x, x, x, options_.heads);
  auto [keys, values] = AppendChunkToCache(state, RowsOn(rows, x.device()), start, qkv[1], qkv[2]);
  auto y = Attend(qkv[0], keys, values, start);
  state.length.index_fill_(0, RowsOn(rows, state.length.device()), start + chunk);
  return y.narrow(1, chunk - keep, keep);
}

torch::Tensor RelativeMultiHeadAttentionImpl::step(const torch::Tensor& x, MixerState& state,
                                                   const torch::Tensor& slots) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) == options_.d_model, "step expects x [B, ",
              options_.d_model, "], got ", x.sizes());
  if (!CanFuse(x, state)) return StepByOps(x, state, slots);
  torch::Tensor slot_holder;
  const int64_t* slot_ids = PrepareFusedStep(state, slots, x.size(0), &slot_holder);
  auto qkv = Dense(x, in_proj_).contiguous();
  auto r = ProjectedDistances(options_.max_context);
  auto u = u_.contiguous();
  auto v = v_.contiguous();
  CachedStepTerms terms;
  terms.content_bias = u.data_ptr<float>();
  terms.position_bias = v.data_ptr<float>();
  terms.r = r.data_ptr<float>();
  return Dense(CachedAttentionStep(qkv, state, slot_ids, options_.heads, terms), out_proj_);
}

torch::Tensor RelativeMultiHeadAttentionImpl::StepByOps(const torch::Tensor& x, MixerState& state,
                                                        const torch::Tensor& slots) {
  const torch::Tensor rows = ResolveSlots(state, slots, x.size(0));
  CheckCapacity(state, rows, 1);
  if (CudaCachedStepApplies(x, state)) {
    CudaCachedStepTerms terms;
    terms.content_bias = u_.contiguous();
    terms.position_bias = v_.contiguous();
    terms.r = ProjectedDistances(options_.max_context).contiguous();
    const auto qkv = Dense(x, in_proj_).contiguous();
    return Dense(CudaCachedStep(qkv, state, rows, options_.heads, options_.heads, terms),
                 out_proj_);
  }
  const auto [q, positions, cached] = ProjectStepToCache(state, rows, in_proj_, options_.heads, x);
  const int64_t keys = cached.keys.size(2);
  auto content = torch::matmul(q + u_.view({1, -1, 1, head_dim_}), cached.keys.transpose(-2, -1));
  auto by_distance = torch::matmul(q + v_.view({1, -1, 1, head_dim_}),
                                   ProjectedDistances(keys).transpose(1, 2));  // [B, H, 1, L]
  // Key j of row b is at distance i_b - j (masked where negative).
  auto distance = positions.to(x.device()).view({-1, 1, 1, 1}) -
                  torch::arange(keys, positions.options().device(x.device())).view({1, 1, 1, -1});
  auto position = by_distance.gather(3, distance.clamp(0, keys - 1).expand_as(by_distance));
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
  auto weights = torch::softmax((content + position) * scale + cached.mask, -1);
  return Dense(MergeHeads(torch::matmul(weights, cached.values)).squeeze(1), out_proj_);
}

int64_t RelativeMultiHeadAttentionImpl::state_bytes_per_sequence(int64_t context) const {
  return KvCacheBytes(context, options_.max_context, options_.d_model);
}

}  // namespace attn
