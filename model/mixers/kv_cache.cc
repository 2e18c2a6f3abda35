#include "model/mixers/kv_cache.h"

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "model/cuda/state_kernels.h"
#include "model/kernels/kernels.h"
#include "model/layers/heads.h"
#include "model/mixers/block_helpers.h"
#include "model/mixers/step_rows.h"

namespace attn {

using torch::indexing::Slice;

MixerState MakeKvCacheState(int64_t rows, int64_t heads, int64_t capacity, int64_t head_dim,
                            torch::Device device) {
  auto opts = torch::TensorOptions().device(device).dtype(torch::kFloat);
  MixerState state;
  state.length = torch::zeros({rows}, opts.dtype(torch::kLong));
  const std::vector<int64_t> shape = {rows, heads, capacity, head_dim};
  if (device.is_cpu()) {
    state.tensors = {LazyZeros(shape), LazyZeros(shape)};
  } else {
    state.tensors = {torch::zeros(shape, opts), torch::zeros(shape, opts)};
  }
  return state;
}

std::pair<torch::Tensor, torch::Tensor> AppendChunkToCache(MixerState& state,
                                                           const torch::Tensor& index,
                                                           int64_t start, const torch::Tensor& k,
                                                           const torch::Tensor& v) {
  const int64_t end = start + k.size(2);
  auto& k_cache = state.tensors[0];
  auto& v_cache = state.tensors[1];
  k_cache.index_put_({index, Slice(), Slice(start, end)}, k);
  v_cache.index_put_({index, Slice(), Slice(start, end)}, v);
  return {k_cache.narrow(2, 0, end).index_select(0, index),
          v_cache.narrow(2, 0, end).index_select(0, index)};
}

CachedStepRows AppendStepToCache(MixerState& state, const torch::Tensor& index,
                                 const torch::Tensor& positions, const torch::Tensor& k,
                                 const torch::Tensor& v) {
  const torch::Tensor at = positions.to(index.device());
  state.tensors[0].index_put_({index, Slice(), at}, k);
  state.tensors[1].index_put_({index, Slice(), at}, v);
  AdvanceRows(state, index, 1);
  const int64_t keys = positions.max().item<int64_t>() + 1;
  auto future = torch::arange(keys, at.options()).view({1, 1, 1, keys}) > at.view({-1, 1, 1, 1});
  return {state.tensors[0].narrow(2, 0, keys).index_select(0, index),
          state.tensors[1].narrow(2, 0, keys).index_select(0, index),
          torch::zeros(future.sizes(), k.options())
              .masked_fill_(future, -std::numeric_limits<double>::infinity())};
}

ProjectedStep ProjectStepToCache(MixerState& state, const torch::Tensor& rows,
                                 const torch::nn::Linear& in_proj, int64_t heads,
                                 const torch::Tensor& x) {
  ProjectedStep step;
  step.positions = state.length.to(torch::kCPU).index_select(0, rows);
  const auto qkv = ProjectToHeads(in_proj, x.unsqueeze(1), x.unsqueeze(1), x.unsqueeze(1),
                                  heads);  // [B, H, 1, Dh] each
  step.q = qkv[0];
  step.cached = AppendStepToCache(state, RowsOn(rows, x.device()), step.positions,
                                  qkv[1].squeeze(2), qkv[2].squeeze(2));
  return step;
}

namespace {

// The fields the cached step and the causal prefill share (CacheHeadsArgs).
void FillCacheHeadsArgs(int64_t batch, int64_t heads, int64_t head_dim, MixerState& state,
                        const int64_t* slots, const float* log_slopes, torch::Tensor& out,
                        kernels::CacheHeadsArgs* args) {
  args->batch = batch;
  args->heads = heads;
  args->head_dim = head_dim;
  args->capacity = state.tensors[0].size(2);
  args->slots = slots;
  args->log_slopes = log_slopes;
  args->k_cache = state.tensors[0].data_ptr<float>();
  args->v_cache = state.tensors[1].data_ptr<float>();
  args->scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  args->out = out.data_ptr<float>();
}

}  // namespace

torch::Tensor CachedAttentionStep(const torch::Tensor& qkv, MixerState& state, const int64_t* slots,
                                  int64_t heads, const CachedStepTerms& terms, int64_t kv_heads) {
  kv_heads = kv_heads > 0 ? kv_heads : heads;
  const int64_t batch = qkv.size(0), head_dim = qkv.size(1) / (heads + 2 * kv_heads);
  const int64_t d = heads * head_dim, kv = kv_heads * head_dim, stride = d + 2 * kv;
  const float* qkv_data = qkv.data_ptr<float>();
  auto* lengths = state.length.data_ptr<int64_t>();
  auto out = torch::empty({batch, d}, qkv.options());
  kernels::CachedAttentionArgs args;
  FillCacheHeadsArgs(batch, heads, head_dim, state, slots, terms.log_slopes, out, &args);
  args.kv_heads = kv_heads;
  args.append = {qkv_data + d, qkv_data + d + kv, stride};
  args.lengths = lengths;
  args.q = qkv_data;
  args.q_stride = stride;
  args.content_bias = terms.content_bias;
  args.position_bias = terms.position_bias;
  args.r = terms.r;
  kernels::CachedAttentionStep(args);
  kernels::AdvanceLengths(batch, slots, lengths);
  return out;
}

torch::Tensor CachedAttentionPrefill(const torch::Tensor& qkv, MixerState& state,
                                     const int64_t* slots, int64_t start, int64_t heads,
                                     const float* log_slopes, int64_t first_output,
                                     int64_t kv_heads) {
  kv_heads = kv_heads > 0 ? kv_heads : heads;
  const int64_t batch = qkv.size(0), time = qkv.size(1);
  const int64_t head_dim = qkv.size(2) / (heads + 2 * kv_heads);
  const int64_t d = heads * head_dim, kv = kv_heads * head_dim, stride = d + 2 * kv;
  const float* qkv_data = qkv.data_ptr<float>();
  auto* lengths = state.length.data_ptr<int64_t>();
  auto out = torch::empty({batch, time - first_output, d}, qkv.options());
  kernels::CausalPrefillArgs args;
  FillCacheHeadsArgs(batch, heads, head_dim, state, slots, log_slopes, out, &args);
  args.kv_heads = kv_heads;
  float* k_cache = state.tensors[0].data_ptr<float>();
  float* v_cache = state.tensors[1].data_ptr<float>();
  for (int64_t t = 0; t < time; ++t) {  // each token at its row's length, which then advances
    const float* token = qkv_data + t * stride;
    kernels::AppendToCache(batch, kv_heads, head_dim, args.capacity, slots, lengths, token + d,
                           token + d + kv, time * stride, k_cache, v_cache);
    kernels::AdvanceLengths(batch, slots, lengths);
  }
  args.time = time;
  args.start = start;
  args.q = qkv_data;
  args.row_stride = time * stride;
  args.token_stride = stride;
  args.first_output = first_output;
  kernels::CausalAttentionPrefill(args);
  return out;
}

bool CudaCachedStepApplies(const torch::Tensor& x, const MixerState& state) {
  return CudaPoolStepApplies(x, state) && state.tensors.size() == 2 &&
         state.tensors[0].size(3) <= cuda::kMaxAttentionHeadDim;
}

torch::Tensor CudaCachedStep(const torch::Tensor& qkv, MixerState& state, const torch::Tensor& rows,
                             int64_t heads, int64_t kv_heads, const CudaCachedStepTerms& terms) {
  const int64_t batch = qkv.size(0), head_dim = state.tensors[0].size(3);
  TORCH_CHECK(qkv.is_contiguous() && qkv.size(1) == (heads + 2 * kv_heads) * head_dim,
              "the cached step expects q, k and v of ", heads, " and ", kv_heads, " heads of ",
              head_dim, ", got ", qkv.sizes());
  TORCH_CHECK(!terms.r.defined() || terms.r.size(1) == state.tensors[0].size(2),
              "the cached step's distances must cover the cache");
  const torch::Tensor slots = RowsOn(rows, qkv.device());
  auto out = torch::empty({batch, heads * head_dim}, qkv.options());
  const auto pointer = [](const torch::Tensor& t) -> const float* {
    return t.defined() ? t.data_ptr<float>() : nullptr;
  };
  cuda::AttentionStepArgs args;
  args.batch = batch, args.heads = heads, args.kv_heads = kv_heads, args.head_dim = head_dim;
  args.capacity = state.tensors[0].size(2), args.stride = qkv.size(1);
  args.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  args.q = qkv.data_ptr<float>(), args.k = args.q + heads * head_dim;
  args.v = args.k + kv_heads * head_dim;
  args.log_slopes = pointer(terms.log_slopes), args.content_bias = pointer(terms.content_bias);
  args.position_bias = pointer(terms.position_bias), args.r = pointer(terms.r);
  args.slots = slots.data_ptr<int64_t>(), args.lengths = state.length.data_ptr<int64_t>();
  args.k_cache = state.tensors[0].data_ptr<float>();
  args.v_cache = state.tensors[1].data_ptr<float>();
  args.out = out.data_ptr<float>();
  args.splits = cuda::AttentionSplits(batch * heads, args.capacity);
  torch::Tensor partial;
  if (args.splits > 1) {
    partial = torch::empty({cuda::AttentionPartialFloats(args)}, qkv.options());
    args.partial = partial.data_ptr<float>();
  }
  RunPoolStep(state, slots, "attention",
              [&](void* stream) { return cuda::AttentionStep(args, stream); });
  return out;
}

int64_t KvCacheBytes(int64_t context, int64_t capacity, int64_t d_model) {
  return 2 * std::min(context, capacity) * d_model * static_cast<int64_t>(sizeof(float)) +
         static_cast<int64_t>(sizeof(int64_t));
}

}  // namespace attn
