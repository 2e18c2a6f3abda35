// The key/value cache shared by the softmax-attention mixers (mha,
// mha-alibi, relative): state.tensors = {k, v}, each [N, H, capacity, Dh],
// position p of row n at [n, :, p]. Internal to model/.
//
// Memory grows with use, not with capacity. On the CPU the cache is an
// anonymous mapping of zero pages that the system backs with memory only
// when a position is first written: a row at L tokens holds about L
// positions' pages per head, whatever the capacity, and a pool of N rows
// costs nothing until sequences arrive (state_pool.h). ReleaseRowPages
// gives a row's pages back when its sequence ends. Positions at or past a
// row's length are never read, so a reused row needs no clearing. Other
// devices get a plain zeroed tensor.
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <utility>
#include <vector>

#include "model/mixers/mixer.h"
#include "model/mixers/state_pool.h"

namespace attn {

MixerState MakeKvCacheState(int64_t rows, int64_t heads, int64_t capacity, int64_t head_dim,
                            torch::Device device);

// Writes k, v [B, H, C, Dh] at positions start..start+C-1 of rows `index`
// (on the state's device) and returns those rows' keys and values up to
// start + C: [B, H, start + C, Dh] each.
std::pair<torch::Tensor, torch::Tensor> AppendChunkToCache(MixerState& state,
                                                           const torch::Tensor& index,
                                                           int64_t start, const torch::Tensor& k,
                                                           const torch::Tensor& v);

// The op-by-op step (a GPU's without the CUDA kernel) of rows `index` (on
// the state's device) at different lengths `positions` (CPU int64 [B], each
// row's length): writes k and v [B, H, Dh] at each row's own position,
// advances the rows' lengths by one, and returns the rows' keys and values
// up to the longest new length L, [B, H, L, Dh] each, beside the additive
// mask [B, 1, 1, L] (0 at or before each row's position, -inf after) that
// keeps a row from another's positions.
struct CachedStepRows {
  torch::Tensor keys, values, mask;
};
CachedStepRows AppendStepToCache(MixerState& state, const torch::Tensor& index,
                                 const torch::Tensor& positions, const torch::Tensor& k,
                                 const torch::Tensor& v);

// The same for a mixer whose one in_proj gives q, k and v (mha, relative):
// x [B, D] of rows `rows` (CPU int64, checked); also returns q [B, H, 1,
// Dh] and the rows' positions before the step (CPU int64 [B]).
struct ProjectedStep {
  torch::Tensor q, positions;
  CachedStepRows cached;
};
ProjectedStep ProjectStepToCache(MixerState& state, const torch::Tensor& rows,
                                 const torch::nn::Linear& in_proj, int64_t heads,
                                 const torch::Tensor& x);

// Optional terms of the fused cached step (see kernels::CachedAttentionArgs).
struct CachedStepTerms {
  const float* log_slopes = nullptr;     // ALiBi, log m_h
  const float* content_bias = nullptr;   // Transformer-XL u
  const float* position_bias = nullptr;  // Transformer-XL v
  const float* r = nullptr;              // Transformer-XL W_r R by distance
};

// The fused one-token step over the cache: qkv [B, 3 D] (contiguous float,
// CPU) holds each row's new q, k and v. Appends k and v at each row's length,
// attends, advances the lengths; returns the heads' output [B, D] before the
// output projection. slots as in kernels.h (null: rows 0..B-1). With
// kv_heads > 0 (grouped-query attention) the cache has kv_heads heads and
// qkv is [B, (heads + 2 kv_heads) Dh]: q, then k and v of kv_heads heads.
torch::Tensor CachedAttentionStep(const torch::Tensor& qkv, MixerState& state, const int64_t* slots,
                                  int64_t heads, const CachedStepTerms& terms,
                                  int64_t kv_heads = 0);

// The fused causal prefill over the cache: qkv [B, C, 3 D] (contiguous
// float, CPU) holds a chunk of C tokens' q, k and v for rows `slots` (all at
// length `start`). Appends the chunk's keys and values, attends, advances the
// lengths to start + C; returns the heads' output [B, C, D] before the output
// projection. log_slopes: ALiBi's log m_h [H], or null. With first_output
// > 0 only tokens first_output.. get an output: [B, C - first_output, D].
// kv_heads as for CachedAttentionStep.
torch::Tensor CachedAttentionPrefill(const torch::Tensor& qkv, MixerState& state,
                                     const int64_t* slots, int64_t start, int64_t heads,
                                     const float* log_slopes, int64_t first_output = 0,
                                     int64_t kv_heads = 0);

// Whether CudaCachedStep applies: the step kernels run (CudaPoolStepApplies,
// block_helpers.h) and the cache's heads fit the kernel.
bool CudaCachedStepApplies(const torch::Tensor& x, const MixerState& state);

// Optional terms of CudaCachedStep, each float32 and contiguous on the
// cache's GPU, or undefined (model/cuda AttentionStepArgs).
struct CudaCachedStepTerms {
  torch::Tensor log_slopes;                   // ALiBi, log m_h [H]
  torch::Tensor content_bias, position_bias;  // Transformer-XL u and v [H, Dh]
  torch::Tensor r;                            // Transformer-XL W_r R [H, capacity, Dh]
};

// The one-token step on a GPU, one kernel pair (model/cuda AttentionStep)
// that reads the rows' lengths on the device, so that a CUDA graph can
// capture it: qkv [B, (heads + 2 kv_heads) Dh] (float32, contiguous, on
// the GPU) holds each row's q, then k and v; rows are the checked host ids
// (the step's device copy serves them, model/mixers/step_rows.h). Appends,
// attends, advances the rows' lengths; returns the heads' output [B,
// heads * Dh] before the output projection. Where CudaCachedStepApplies.
torch::Tensor CudaCachedStep(const torch::Tensor& qkv, MixerState& state, const torch::Tensor& rows,
                             int64_t heads, int64_t kv_heads,
                             const CudaCachedStepTerms& terms = {});

// Bytes a sequence's cache holds at `context` tokens.
int64_t KvCacheBytes(int64_t context, int64_t capacity, int64_t d_model);

}  // namespace attn
