// CUDA kernels for the recurrent state updates of the GPU path, written from
// the equations of the mixers' headers. They take raw device pointers and
// run on the calling thread's current GPU (the caller sets it to the
// tensors' own), queued on `stream` (a cudaStream_t; null: the legacy
// default stream). Callers pass LibTorch's current stream
// (CurrentCudaStream, model/mixers/block_helpers.h), so that the kernels
// are ordered with the ops around them, and a CUDA graph, which captures
// the stream it sets as current, takes them in. The kernels are compiled with nvcc
// only when the build asks for them (-DATTN_CUDA_KERNELS=ON, which
// scripts/gpu/device_run.sh passes); elsewhere KernelsEnabled() is false
// and the op-by-op path runs. Setting
// ATTN_CUDA_KERNELS=0 in the environment turns them off at run time, to
// compare the two paths on one machine.
#pragma once

#include <cstdint>
#include <string>

#include "model/kernels/kernels.h"

namespace attn::cuda {

// Whether this build holds the kernels and the environment allows them.
bool KernelsEnabled();

// One token of Mamba-2's recurrence (model/mixers/mamba2.h) for `batch`
// rows of `heads` heads of P = head_dim channels and N = state_size, with
// G = groups groups of heads sharing B and C; every array contiguous,
// float32, on the device:
//   x [batch, heads, P], b and c [batch, G, N], dt [batch, heads] (after
//   softplus), a_log, d [heads], s_in [batch, heads, P, N]; writes
//   s_out (the same shape) and y [batch, heads, P].
//   S = exp(dt A) S + dt x B^T,  y = S C + D x,  A = -exp(a_log)
// With `slots` (int64 [batch] on the device, distinct), row b's S is row
// slots[b] of s_in and s_out [rows, heads, P, N]: a state pool's, which
// the step updates in place when s_out is s_in (each lane writes only what
// it read), so a decode step neither gathers its rows' matrices nor
// scatters them back. Null: row b's S is row b.
// The inputs may be read in place from the block's projections: rows of x
// are x_stride floats apart, of b and c bc_stride (0: packed), and with
// dt_bias [heads] dt is the raw projection (rows dt_stride apart, 0:
// heads), the step taking softplus(dt + dt_bias).
struct Mamba2StepArgs {
  int64_t batch = 0, heads = 0, head_dim = 0, state_size = 0, groups = 1;
  int64_t x_stride = 0, bc_stride = 0, dt_stride = 0;
  const float *x = nullptr, *b = nullptr, *c = nullptr, *dt = nullptr, *dt_bias = nullptr;
  const float *a_log = nullptr, *d = nullptr, *s_in = nullptr;
  const int64_t* slots = nullptr;
  float *s_out = nullptr, *y = nullptr;
};
// Queues the step; returns the launch's error, empty when there is none.
std::string Mamba2Step(const Mamba2StepArgs& args, void* stream);

// One token of RWKV-7's delta rule (model/mixers/rwkv7.h) for `batch` rows
// of `heads` heads of N = head_dim channels, C = heads * N; every array
// contiguous, float32, on the device: r, w, k, v, kk and iclr [batch, C],
// s_in [batch, heads, N, N] (rows: value channels, columns: key channels);
// writes s_out (the same shape) and o [batch, C]. Per head:
//   S = S (diag(w) - kk^T (iclr * kk)) + v^T k,  o = S r
// `slots` as Mamba2StepArgs': null, or the state pool's rows, s_in and
// s_out [rows, heads, N, N], in place when they are the same array (a
// warp reads a row of S whole before it writes it).
struct Rwkv7StepArgs {
  int64_t batch = 0, heads = 0, head_dim = 0;
  const float *r = nullptr, *w = nullptr, *k = nullptr, *v = nullptr;
  const float *kk = nullptr, *iclr = nullptr, *s_in = nullptr;
  const int64_t* slots = nullptr;
  float *s_out = nullptr, *o = nullptr;
};
std::string Rwkv7Step(const Rwkv7StepArgs& args, void* stream);

// Mamba-2's elementwise stages around its scan (mamba2_math.h), one kernel
// each where the ops take about eight: the depthwise causal convolution and
// its silu, with the rows' new windows (the CPU kernel's arguments,
// kernels::CausalConvArgs, pointed at the GPU's memory), and the gated RMS
// norm of the scan's output (kernels::GatedRmsNormRows's arguments).
struct GatedRmsNormArgs {
  int64_t rows = 0, d = 0, groups = 1, z_stride = 0;
  const float *y = nullptr, *z = nullptr, *gain = nullptr;
  float eps = 0.f;
  float* out = nullptr;
};
std::string CausalConvSilu(const kernels::CausalConvArgs& args, void* stream);
std::string GatedRmsNorm(const GatedRmsNormArgs& args, void* stream);

// RWKV-7's delta rule over the `time` tokens of a prefill of `batch` rows,
// Rwkv7Step's token after token in one launch, with S updated in place:
// w, k, v, kk and iclr [time, batch, C] (time-major, so that token t's rows
// are Rwkv7Step's [batch, C]), r [time - first_output, batch, C] (null when
// no output is wanted), s [batch, heads, N, N]; writes o [batch, time -
// first_output, C], the outputs of tokens first_output..time-1. A prefill
// ran this as a dozen ops a token.
struct Rwkv7ScanArgs {
  int64_t batch = 0, time = 0, heads = 0, head_dim = 0, first_output = 0;
  const float *r = nullptr, *w = nullptr, *k = nullptr, *v = nullptr;
  const float *kk = nullptr, *iclr = nullptr;
  float *s = nullptr, *o = nullptr;
};
std::string Rwkv7Scan(const Rwkv7ScanArgs& args, void* stream);

// RWKV-7's elementwise stages around its projections and state update,
// one kernel each where the torch operations take six to a dozen and a
// half (rwkv7_math.h). The token shift's mixes and the activations take
// the CPU kernels' arguments (model/kernels/kernels.h: TokenShiftMix, at
// most kMaxRwkv7Mixes mixes, and Rwkv7Activations), pointed at the GPU's
// memory: float32, contiguous, the parameters' too.
inline constexpr int64_t kMaxRwkv7Mixes = 8;
struct Rwkv7Mixes {  // the mixes' pointers, held by value for the kernel
  const float* mixes[kMaxRwkv7Mixes] = {};
};
std::string Rwkv7Mix(const kernels::TokenShiftMixArgs& args, void* stream);
std::string Rwkv7Activations(const kernels::Rwkv7ActivationsArgs& args, void* stream);

// The block's output before its gate from the state update's o, for the
// last `tail` of a chunk's `time` tokens of `batch` rows, C = heads * N:
//   o and r [batch, tail, C]; k and v [batch, time, C] (the chunk's, whose
//   last tail tokens are the outputs'); gain, bias and bonus [C]; writes
//   out [batch, tail, C]. Per head, over its N channels:
//   out = (o - mean) / sqrt(variance + eps) gain + bias + (sum_j r_j k_j bonus_j) v
struct Rwkv7HeadOutputArgs {
  int64_t batch = 0, time = 0, tail = 0, heads = 0, head_dim = 0;
  float eps = 0.f;
  const float *o = nullptr, *r = nullptr, *k = nullptr, *v = nullptr;
  const float *gain = nullptr, *bias = nullptr, *bonus = nullptr;
  float* out = nullptr;
};
std::string Rwkv7HeadOutput(const Rwkv7HeadOutputArgs& args, void* stream);

// RWKV-4's WKV (model/mixers/rwkv4.h) over `time` tokens of `batch` rows of
// C = channels channels, a step (time 1) or a prefill alike: k, v [batch,
// time, C], decay w = -exp(time_decay) and first u [C]; the rows' num, den
// and max [batch, C], updated in place; writes out [batch, time -
// first_output, C], wkv of the tokens from first_output on. Per channel, in
// the stable form (p = max):
//   output: q = max(p, u + k);  wkv = (e^(p-q) num + e^(u+k-q) v) / (e^(p-q) den + e^(u+k-q))
//   update: q = max(p + w, k);  num = e^(p+w-q) num + e^(k-q) v;  den likewise;  p = q
// By ops it was a dozen launches a token and layer.
struct Rwkv4WkvArgs {
  int64_t batch = 0, time = 0, channels = 0, first_output = 0;
  const float *k = nullptr, *v = nullptr, *decay = nullptr, *first = nullptr;
  float *num = nullptr, *den = nullptr, *max = nullptr, *out = nullptr;
};
std::string Rwkv4Wkv(const Rwkv4WkvArgs& args, void* stream);

// One token of linear attention (model/mixers/linear_attention.h) for
// `batch` rows of `heads` heads of N = head_dim channels, D = heads * N,
// updating rows `slots` of a state pool in place:
//   qkv [batch, 3 D] (q, k, v side by side), decay [heads] (g_h; null: no
//   decay), slots [batch] (the state rows; null: rows 0..batch-1), s [rows,
//   heads, N, N] (rows: key features, columns: value channels), z [rows,
//   heads, N]; writes out [batch, D]. The caller advances the rows' lengths.
//   Per head, phi = elu(x) + 1, or exp(x - max x) with exp_feature:
//   S = g S + phi(k) v^T,  z = g z + phi(k),  y = phi(q)^T S / (phi(q)^T z + eps)
// Every array contiguous and on the device; the slots distinct.
struct LinearStepArgs {
  int64_t batch = 0, heads = 0, head_dim = 0;
  bool exp_feature = false;
  float eps = 0.f;
  const float *qkv = nullptr, *decay = nullptr;
  const int64_t* slots = nullptr;
  float *s = nullptr, *z = nullptr, *out = nullptr;
};
// A block holds a thread per channel of a head: larger heads take the
// op-by-op path.
inline constexpr int64_t kMaxLinearHeadDim = 1024;
std::string LinearStep(const LinearStepArgs& args, void* stream);

// One token of aft-decay (model/mixers/aft_decay.h) for `batch` rows of
// D = channels channels and a window of s, each row at its own length t,
// updating rows `slots` of a state pool in place:
//   qkv [batch, 3 D] (q, k, v side by side), decay [D] (a_d, lambda_d =
//   -log a_d), bias [heads, s] (u_h; channel d in head d / (D / heads)),
//   slots [batch] (null: rows 0..batch-1), ref, num, den [rows, D], ring_k
//   and ring_v [rows, s, D] (raw keys and values; slot j holds position p
//   in [t - s, t) with p = j mod s, none where p < 0), lengths [rows]
//   (int64, t; the caller advances them after the step); writes out
//   [batch, D]. Per channel:
//   y = sigmoid(q) (sum_j exp(k_j + w_j) v_j + exp(k + u[0]) v
//                   + exp(ref - lambda) num) / (the same without v)
//   w_j = u[delta_j] inside the window, 0 at its edge (delta_j = s); then
//   the key at t - s (if t >= s) joins num and den at weight exp(key), and
//   k and v take its slot.
struct AftDecayStepArgs {
  int64_t batch = 0, channels = 0, heads = 0, window = 0;
  const float *qkv = nullptr, *decay = nullptr, *bias = nullptr;
  const int64_t* slots = nullptr;
  const int64_t* lengths = nullptr;
  float *ref = nullptr, *num = nullptr, *den = nullptr, *ring_k = nullptr, *ring_v = nullptr;
  float* out = nullptr;
};
std::string AftDecayStep(const AftDecayStepArgs& args, void* stream);

// One token of AFT (model/mixers/aft.h: aft-full, -local, -simple, -conv)
// for `batch` rows of D = channels channels and a window of s (0 for
// aft-simple), each row at its own length t, updating rows `slots` of a
// state pool in place:
//   q, k, v: row b's at q + b * stride (and k, v likewise); bias
//   [bias_heads, bias_rows, s] (null when s = 0; row t of the table for a
//   query at t when bias_rows > 1, else row 0; channel d in bias head
//   d / (D / bias_heads)); slots [batch] (null: rows 0..batch-1); c, num,
//   den [rows, D]; ring_ek, ring_ekv [rows, s, D] (exp(K - c) and
//   exp(K - c) V; slot j holds position p in [t - s, t) with p = j mod s,
//   none where p < 0); lengths [rows] (int64, t; the caller advances them);
//   writes out [batch, D]. Per channel, with m = max(c, k):
//   y = sigmoid(q) (sum over the prefix of exp(K + w) V) / (sum of exp(K + w))
//   w = bias[delta] inside the window, 0 beyond; everything held relative to
//   the running max c, which becomes m; the key at t - s (if t >= s) joins
//   num and den, and k takes its slot.
struct AftStepArgs {
  int64_t batch = 0, channels = 0, window = 0, bias_heads = 1, bias_rows = 1, stride = 0;
  const float *q = nullptr, *k = nullptr, *v = nullptr, *bias = nullptr;
  const int64_t *slots = nullptr, *lengths = nullptr;
  float *c = nullptr, *num = nullptr, *den = nullptr, *ring_ek = nullptr, *ring_ekv = nullptr;
  float* out = nullptr;
};
std::string AftStep(const AftStepArgs& args, void* stream);

// One token of softmax attention over a key/value cache
// (model/mixers/kv_cache.h) for `batch` rows of `heads` query heads of
// Dh = head_dim channels, heads / kv_heads of them sharing a key/value
// head, each row at its own length L, read on the device:
//   q, k, v: row b's [heads, Dh], [kv_heads, Dh] and [kv_heads, Dh] at
//   q + b * stride (k and v likewise); k_cache, v_cache [rows, kv_heads,
//   capacity, Dh]; slots [batch] (null: rows 0..batch-1); lengths [rows]
//   (int64; the caller advances them); writes out [batch, heads, Dh].
// The new key and value go to cache position L, then per query head h
//   score_j = scale ((q + u) . k_j + (q + p) . r_{L-j}) - m_h (L - j),
//   y = sum_{j=0..L} softmax(score)_j v_j
// with m_h = exp(log_slopes[h]) (ALiBi; null: 0), u = content_bias and
// p = position_bias [heads, Dh] (Transformer-XL; null: 0), r [heads,
// capacity, Dh] by distance (null: no position term). A row at or past the
// capacity (a CUDA graph's spare row, run on past the context) leaves the
// cache alone and gets zeros. With splits > 1 each (row, head) is split
// over `splits` blocks, each taking a span of the positions (a row alone
// at a long context would leave most of the GPU idle), whose partial
// results `partial` holds (AttentionPartialFloats floats) until a second
// kernel merges them.
struct AttentionStepArgs {
  int64_t batch = 0, heads = 0, kv_heads = 0, head_dim = 0, capacity = 0, stride = 0;
  int64_t splits = 1;
  float* partial = nullptr;
  float scale = 1.f;
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  const float *log_slopes = nullptr, *content_bias = nullptr, *position_bias = nullptr;
  const float* r = nullptr;
  const int64_t *slots = nullptr, *lengths = nullptr;
  float *k_cache = nullptr, *v_cache = nullptr, *out = nullptr;
};
// A lane holds head_dim / 32 channels' sums in registers: larger heads take
// the op-by-op path.
inline constexpr int64_t kMaxAttentionHeadDim = 256;
std::string AttentionStep(const AttentionStepArgs& args, void* stream);

// How many blocks to split each of `blocks` (rows x heads) over, for a
// cache of `capacity` positions: enough for about kAttentionBlocksWanted
// blocks in all (a few per streaming multiprocessor of an H100's 132), but
// no span shorter than kAttentionSplitPositions at the full capacity. A
// function of the batch and the cache, not of the lengths, which only the
// GPU knows: a CUDA graph's bucket keeps its count.
inline constexpr int64_t kAttentionBlocksWanted = 512;
inline constexpr int64_t kAttentionSplitPositions = 256;
inline int64_t AttentionSplits(int64_t blocks, int64_t capacity) {
  const int64_t wanted = (kAttentionBlocksWanted + blocks - 1) / (blocks > 0 ? blocks : 1);
  const int64_t most = capacity / kAttentionSplitPositions;
  const int64_t splits = wanted < most ? wanted : most;
  return splits > 1 ? splits : 1;
}
// The floats of AttentionStepArgs::partial.
inline int64_t AttentionPartialFloats(const AttentionStepArgs& a) {
  return a.splits > 1 ? a.batch * a.heads * a.splits * (2 + a.head_dim) : 0;
}

// A mixture of SwiGLU experts (model/layers/mixture_of_experts.h) for
// `rows` rows, each routed on the device to top_k of `experts` experts:
//   x [rows, d] float32; chosen [rows, top_k] (int64 expert ids, the
//   router's top k); gate, up and down: device arrays of `experts` pointers
//   to each expert's [hidden, d], [hidden, d] and [d, hidden] weights,
//   float32, or bf16 where `bf16`; act [rows * top_k, hidden] scratch;
//   writes out [rows * top_k, d], for choice i = row * top_k + k of
//   expert e = chosen[i]:
//     out_i = W_down,e (silu(W_gate,e x_row) * (W_up,e x_row))
// The caller weighs each row's choices by their gates and sums them. A
// block serves one expert and a few rows of its matrices, for every choice
// of that expert, so each chosen expert's weights are read once a call and
// an expert no row chose costs a block that returns at once: the bytes the
// host's grouping of rows by expert reads, without the host ever waiting
// for the router. Each choice's sums are a warp's, in float32.
struct ExpertsArgs {
  int64_t rows = 0, top_k = 0, experts = 0, d = 0, hidden = 0;
  bool bf16 = false;
  const float* x = nullptr;
  const int64_t* chosen = nullptr;
  const void* const* gate = nullptr;
  const void* const* up = nullptr;
  const void* const* down = nullptr;
  float *act = nullptr, *out = nullptr;
};
// A block lists the choices of its expert in shared memory: at most this
// many choices (rows x top_k) a call. Past a few dozen choices an expert's
// rows are better multiplied as one matrix product (the host's grouping).
inline constexpr int64_t kMaxExpertChoices = 256;
std::string Experts(const ExpertsArgs& args, void* stream);

}  // namespace attn::cuda
