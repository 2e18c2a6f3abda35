#include "model/mixers/multi_head_attention.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "model/layers/dense.h"
#include "model/layers/heads.h"
#include "model/mixers/kv_cache.h"

namespace attn {

torch::Tensor ScaledDotProductAttention(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& bias,
                                        bool rows_may_be_all_masked) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  // In a long prefill the [Tq, Tk] scores are the largest tensors of the
  // model and every pass over them shows: the scale goes on q instead, and
  // the bias and the masked-row fix work in place.
  auto scores = torch::matmul(q * scale, k.transpose(-2, -1));
  if (bias.defined()) scores.add_(bias);
  auto weights = torch::softmax(scores, -1);
  // A row whose keys are all masked is 0/0 = NaN after softmax: it attends to
  // nothing, so its output is zero.
  if (bias.defined() && rows_may_be_all_masked) weights.masked_fill_(weights.isnan(), 0.0);
  return torch::matmul(weights, v);
}

torch::Tensor AlibiSlopes(int64_t heads) {
  auto h = torch::arange(1, heads + 1, torch::kDouble);
  return torch::pow(2.0, -8.0 * h / static_cast<double>(heads)).to(torch::kFloat);
}

torch::Tensor AlibiBias(const torch::Tensor& slopes, int64_t tq, int64_t tk, int64_t query_offset) {
  auto opts = slopes.options();
  auto i = torch::arange(query_offset, query_offset + tq, opts).unsqueeze(1);
  auto j = torch::arange(tk, opts).unsqueeze(0);
  auto distance = (i - j).abs();                            // [Tq, Tk]
  return -slopes.view({-1, 1, 1}) * distance.unsqueeze(0);  // [H, Tq, Tk]
}

torch::Tensor FutureKeys(int64_t tq, int64_t tk, int64_t query_offset, torch::Device device) {
  auto options = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto i = torch::arange(query_offset, query_offset + tq, options).unsqueeze(1);
  auto j = torch::arange(tk, options).unsqueeze(0);
  return j > i;
}

torch::Tensor CausalBias(int64_t tq, int64_t tk, int64_t query_offset,
                         const torch::TensorOptions& options) {
  return torch::zeros({tq, tk}, options)
      .masked_fill_(FutureKeys(tq, tk, query_offset, options.device()),
                    -std::numeric_limits<double>::infinity());
}

MultiHeadAttentionImpl::MultiHeadAttentionImpl(const MixerOptions& options)
    : SequenceMixer(options), head_dim_(options.d_model / options.heads) {
  TORCH_CHECK(options.d_model % options.heads == 0, "d_model (", options.d_model,
              ") must be divisible by heads (", options.heads, ")");
  in_proj_ = register_module("in_proj", torch::nn::Linear(options.d_model, 3 * options.d_model));
  out_proj_ = register_module("out_proj", torch::nn::Linear(options.d_model, options.d_model));
  if (uses_alibi()) {
    auto log_slopes = AlibiSlopes(options.heads).log();
    log_slopes_ = options.learn_alibi_slopes ? register_parameter("log_alibi_slopes", log_slopes)
                                             : register_buffer("log_alibi_slopes", log_slopes);
  }
}

torch::Tensor MultiHeadAttentionImpl::alibi_slopes() const {
  return log_slopes_.defined() ? log_slopes_.exp() : torch::Tensor();
}

torch::Tensor MultiHeadAttentionImpl::AttendHeads(const torch::Tensor& q, const torch::Tensor& k,
                                                  const torch::Tensor& v,
                                                  const torch::Tensor& key_padding_mask,
                                                  bool causal, int64_t query_offset) {
  const int64_t tq = q.size(2), tk = k.size(2);
  torch::Tensor bias;
  if (uses_alibi()) {
    bias = AlibiBias(alibi_slopes().to(q.options()), tq, tk, query_offset);
    if (causal) {
      bias.masked_fill_(FutureKeys(tq, tk, query_offset, q.device()),
                        -std::numeric_limits<double>::infinity());
    }
  } else if (causal) {
    bias = CausalBias(tq, tk, query_offset, q.options());
  }
  if (key_padding_mask.defined()) {
    TORCH_CHECK(key_padding_mask.sizes() == torch::IntArrayRef({q.size(0), tk}),
                "key_padding_mask must be [batch, key_time]");
    auto pad = torch::zeros(key_padding_mask.sizes(), q.options())
                   .masked_fill(key_padding_mask, -std::numeric_limits<double>::infinity())
                   .view({q.size(0), 1, 1, tk});
    bias = bias.defined() ? bias + pad : pad;
  }
  // Only key padding can mask every key of a query (a causal query always
  // sees itself, and queries never start before position 0).
  const bool rows_may_be_all_masked = key_padding_mask.defined() || query_offset < 0;
  return Dense(MergeHeads(ScaledDotProductAttention(q, k, v, bias, rows_may_be_all_masked)),
               out_proj_);
}

torch::Tensor MultiHeadAttentionImpl::attend(const torch::Tensor& query, const torch::Tensor& key,
                                             const torch::Tensor& value,
                                             const torch::Tensor& key_padding_mask, bool causal) {
  auto qkv = ProjectToHeads(in_proj_, query, key, value, options_.heads);
  const int64_t offset = causal ? key.size(1) - query.size(1) : 0;
  return AttendHeads(qkv[0], qkv[1], qkv[2], key_padding_mask, causal, offset);
}

torch::Tensor MultiHeadAttentionImpl::forward(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == options_.d_model, "expected x [B, T, ", options_.d_model,
              "], got ", x.sizes());
  return attend(x, x, x, {}, /*causal=*/true);
}

MixerState MultiHeadAttentionImpl::initial_state(int64_t rows, torch::Device device) const {
  return MakeKvCacheState(rows, options_.heads, options_.max_context, head_dim_, device);
}

torch::Tensor MultiHeadAttentionImpl::Prefill(const torch::Tensor& x, MixerState& state,
                                              const torch::Tensor& slots, int64_t keep) {
  auto rows = ResolveSlots(state, slots, x.size(0));
  const int64_t chunk = x.size(1);
  CheckCapacity(state, rows, chunk);
  const int64_t start = CommonLength(state, rows);
  if (CanFuse(x, state)) {
    auto qkv = DenseLeadingColumnsForLast(x.contiguous(), in_proj_, options_.d_model, keep)
                   .contiguous();  // [B, C, 3D]
    torch::Tensor log_slopes = uses_alibi() ? log_slopes_.contiguous() : torch::Tensor();
    return Dense(CachedAttentionPrefill(
                     qkv, state, rows.data_ptr<int64_t>(), start, options_.heads,
                     log_slopes.defined() ? log_slopes.data_ptr<float>() : nullptr, chunk - keep),
                 out_proj_);
  }
  auto qkv = ProjectToHeads(in_proj_, x, x, x, options_.heads);
  auto [keys, values] = AppendChunkToCache(state, RowsOn(rows, x.device()), start, qkv[1], qkv[2]);
  // Queries chunk - keep.. sit at positions start + chunk - keep..
  auto y = AttendHeads(qkv[0].narrow(2, chunk - keep, keep), keys, values, {}, /*causal=*/true,
                       start + chunk - keep);
  state.length.index_fill_(0, RowsOn(rows, state.length.device()), start + chunk);
  return y;
}

torch::Tensor MultiHeadAttentionImpl::step(const torch::Tensor& x, MixerState& state,
                                           const torch::Tensor& slots) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) == options_.d_model, "step expects x [B, ",
              options_.d_model, "], got ", x.sizes());
  if (!CanFuse(x, state)) return StepByOps(x, state, slots);
  torch::Tensor slot_holder;
  const int64_t* slot_ids = PrepareFusedStep(state, slots, x.size(0), &slot_holder);
  auto qkv = Dense(x, in_proj_).contiguous();
  CachedStepTerms terms;
  // The kernel exponentiates the log-slopes itself: no tensor op per step.
  torch::Tensor log_slopes = uses_alibi() ? log_slopes_.contiguous() : torch::Tensor();
  if (log_slopes.defined()) terms.log_slopes = log_slopes.data_ptr<float>();
  return Dense(CachedAttentionStep(qkv, state, slot_ids, options_.heads, terms), out_proj_);
}

torch::Tensor MultiHeadAttentionImpl::StepByOps(const torch::Tensor& x, MixerState& state,
                                                const torch::Tensor& slots) {
  const torch::Tensor rows = ResolveSlots(state, slots, x.size(0));
  CheckCapacity(state, rows, 1);
  if (CudaCachedStepApplies(x, state)) {
    CudaCachedStepTerms terms;
    if (uses_alibi()) terms.log_slopes = log_slopes_.contiguous();
    const auto qkv = Dense(x, in_proj_).contiguous();
    return Dense(CudaCachedStep(qkv, state, rows, options_.heads, options_.heads, terms),
                 out_proj_);
  }
  const auto [q, positions, cached] = ProjectStepToCache(state, rows, in_proj_, options_.heads, x);
  torch::Tensor bias = cached.mask;
  if (uses_alibi()) {  // -m_h (i - j) for the keys j <= i a row sees
    const auto i = positions.to(x.device(), x.scalar_type()).view({-1, 1, 1, 1});
    const auto j = torch::arange(bias.size(3), x.options()).view({1, 1, 1, -1});
    bias = bias - alibi_slopes().to(x.options()).view({1, -1, 1, 1}) * (i - j).abs();
  }
  auto y = ScaledDotProductAttention(q, cached.keys, cached.values, bias, false);
  return Dense(MergeHeads(y).squeeze(1), out_proj_);
}

void MultiHeadAttentionImpl::ResetSlots(MixerState& state, const torch::Tensor& slots) const {
  // Positions at or past a row's length are never read: the cache itself
  // need not be cleared.
  state.length.index_fill_(0, slots.to(state.length.device(), torch::kLong), 0);
}

void MultiHeadAttentionImpl::ReleaseSlots(MixerState& state, const torch::Tensor& slots) const {
  ResetSlots(state, slots);
  ReleaseRowPages(state, slots);
}

int64_t MultiHeadAttentionImpl::state_bytes_per_sequence(int64_t context) const {
  return KvCacheBytes(context, options_.max_context, options_.d_model);
}

}  // namespace attn
