// Fused CPU loops for the one-token recurrent updates of the mixers.
//
// Why: a decode step at batch 1 is made of tiny tensors, and each LibTorch op
// costs ~1.3 us of dispatch here. Done op by op, the elementwise work around
// a step's two matrix multiplications would cost more than the
// multiplications. Each function below does that work in one pass over the
// channels of every sequence, in place on the state rows of a slot pool.
//
// All pointers are float32, contiguous, row-major. `slots[b]` is the pool row
// of batch element b (slots null: row b) and `lengths[slot]` the number of
// tokens that row has consumed before this step. The functions parallelise
// over the batch.
#pragma once

#include <cstdint>

namespace attn::kernels {

// What the cached step and the causal prefill share: the heads, the rows'
// cache ([N, H, capacity, Dh] each for keys and values, or fewer heads:
// kv_heads), the score scale and
// ALiBi's slopes, which arrive as log m_h (the module's parameter), or null.
struct CacheHeadsArgs {
  int64_t batch = 0, heads = 0, head_dim = 0, capacity = 0;
  // Grouped-query attention: the cache holds kv_heads heads ([N, kv_heads,
  // capacity, Dh]) and query head h reads head h / (heads / kv_heads).
  // 0: as many as heads.
  int64_t kv_heads = 0;
  const int64_t* slots = nullptr;
  const float* log_slopes = nullptr;  // [H] log m_h, or null
  const float* k_cache = nullptr;     // [N, H, capacity, Dh]
  const float* v_cache = nullptr;     // [N, H, capacity, Dh]
  float scale = 1.0f;
  float* out = nullptr;
};

// first_output, in each prefill kernel's arguments: every token of the
// chunk enters the state, but only tokens t >= first_output get an output,
// written at out[b][t - first_output]. A language model's last layer needs
// the output of a prompt's last token only (and of no token in the prompt's
// earlier chunks); the skipped queries are most of that layer's attention.

// Softmax attention of one new token per sequence over a key/value cache.
//
//   score_j = scale * ((q + u) . k_j + (q + v) . r_{L-j}) - slope_h * (L - j),
//   y = sum_{j=0..L} softmax(score)_j v_j
//
// where L is the row's length. The new key/value is at cache position L:
// put there before the call (AppendToCache) or by the call (`append`). u, v
// and r are Transformer-XL's content bias, position bias and projected
// relative positions; with r null only the content term is used (u may be
// null). out: [B, H, Dh].
//
// With `append.k` set, the task that attends to a row's key/value head
// first writes the row's new key and value there, as AppendToCache would:
// the write shares the cache lines the task then reads, and runs on every
// thread instead of on one while the others wait. An LFM2-350M decode step
// of 51 rows spent 3.6% of its samples appending alone
// (docs/benchmarks-log.md, "The key/value append inside the attention step").
struct CachedAttentionArgs : CacheHeadsArgs {
  const int64_t* lengths = nullptr;  // [N]
  const float* q = nullptr;          // row b at q + b * q_stride: [H, Dh]
  int64_t q_stride = 0;
  const float* content_bias = nullptr;   // u [H, Dh], or null
  const float* position_bias = nullptr;  // v [H, Dh], used with r
  const float* r = nullptr;              // [H, capacity, Dh] by distance, or null
  // With k set, k_cache and v_cache must be writable: the step writes them.
  struct NewKeysAndValues {
    const float* k = nullptr;  // row b at k + b * stride: [kv heads, Dh]; null: none
    const float* v = nullptr;  // likewise
    int64_t stride = 0;
  } append;
};
// The register tiles of the two attention kernels below and of
// LinearAttentionPrefill: kWide keeps up to 24 of AVX-512's 32 vector
// registers of sums in vectors of 16 floats; kNarrow sums in vectors of 8
// and fits AVX2's 16 registers. On an AVX2 CPU kWide's clone takes its
// 16-float vectors apart through the stack: LFM2's prefill attention ran at
// 5.1 GFLOP/s there, kNarrow at 45.8 on the same Zen 1 (attn-kernel-bench
// --attention; docs/benchmarks-log.md, "The attention kernels' tiles on
// AVX2"), the linear prefill at 4.0 and 25.4 (--linear). Both give the same
// results up to float rounding; each CPU runs AttentionTilesForCpu(), and
// the tests run both on every machine.
enum class AttentionTiles { kWide, kNarrow };
AttentionTiles AttentionTilesForCpu();

void CachedAttentionStep(const CachedAttentionArgs& a,
                         AttentionTiles tiles = AttentionTilesForCpu());

// Causal softmax attention of a chunk of C tokens per sequence over the key/
// value cache (the prefill form of CachedAttentionStep, without the
// Transformer-XL terms). Query t of row b sits at position P = start + t and
//
//   score_j = scale * q_t . k_j - slope_h * (P - j),   j = 0..P,
//   y_t = sum_j softmax(score)_j v_j.
//
// Keys and values 0..start+C-1 must already be in the cache (AppendToCache).
// Why a kernel: op by op the prefill built the full [C, start + C] score
// matrix, half of it masked, plus its mask and bias, and took several passes
// over it; here each query's scores are computed only up to its own position,
// 64 keys at a time with an online softmax, so the scratch is the chunk's
// (about Dh floats a query), whatever the context. out: [B, C, H, Dh].
// Only queries t >= first_output are attended: out is [B, C - first_output,
// H, Dh] (first_output above). With no query left the kernel returns at
// once: the keys and values are in the cache already.
struct CausalPrefillArgs : CacheHeadsArgs {
  int64_t time = 0;          // C
  int64_t start = 0;         // every row's length before the chunk
  const float* q = nullptr;  // query t of row b at q + b * row_stride + t * token_stride: [H, Dh]
  int64_t row_stride = 0, token_stride = 0;
  int64_t first_output = 0;
};
void CausalAttentionPrefill(const CausalPrefillArgs& a,
                            AttentionTiles tiles = AttentionTilesForCpu());

// Writes each row's new key and value ([H, Dh] at k + b * stride, likewise v)
// into cache position lengths[slots[b]].
void AppendToCache(int64_t batch, int64_t heads, int64_t head_dim, int64_t capacity,
                   const int64_t* slots, const int64_t* lengths, const float* k, const float* v,
                   int64_t stride, float* k_cache, float* v_cache);

// exp(x) as the kernels compute it: within 2 ulp on [-87, 88], 0 below,
// +inf above, NaN for NaN. Exposed for its test.
float Exp(float x);

// log(sum_i exp(x[i])), shifted by the maximum so that it cannot overflow;
// -inf for n == 0 or all x[i] == -inf, NaN if any x[i] is NaN. The sampler
// calls it on every vocabulary-sized row of logits, so it is vectorised.
float LogSumExp(const float* x, int64_t n);

// The first index of the largest x[i] (NaN never wins); 0 for n == 0 or no
// value above -inf. Greedy sampling calls it on every row of logits.
int64_t ArgMax(const float* x, int64_t n);

// x[i] = GELU(x[i]) = x[i] / 2 * (1 + erf(x[i] / sqrt(2))), in place, for
// n values. erf by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7,
// the approximation ATen's vectorised CPU kernel also uses); for x < 0,
// 1 + erf is computed as erfc directly rather than as a difference near 1,
// so the small values of the negative tail stay within a fraction of a
// percent. Vectorised and split over the intra-op threads; op by op, GELU
// was up to a tenth of a decode step at 64 rows.
void GeluInPlace(int64_t n, float* x);

// gate[i] = silu(gate[i]) * up[i] = gate[i] * up[i] / (1 + exp(-gate[i])),
// in place, for n values: SwiGLU's gating in one vectorised pass over the
// intra-op threads, where LibTorch's silu and product took two passes and a
// temporary (docs/benchmarks-log.md, "SwiGLU's gating in one pass").
void SiluMulInPlace(int64_t n, float* gate, const float* up);

// lengths[slots[b]] += 1 for every b.
void AdvanceLengths(int64_t batch, const int64_t* slots, int64_t* lengths);

// Linear attention, one token per sequence, per head h:
//   S = g_h S + phi(k) v^T,  z = g_h z + phi(k),  y = phi(q)^T S / (phi(q) . z + eps)
// phi is elu(x)+1 (exp_feature false) or exp(x - max_i x_i) (true); g_h is
// decay[h] (linear-decay) or 1 when decay is null.
// What the step and the prefill share: the heads, the feature map, the
// inputs (laid out as each says) and the state rows, updated in place.
struct LinearHeadsArgs {
  int64_t batch = 0, heads = 0, head_dim = 0;
  bool exp_feature = false;
  float eps = 1e-6f;
  const int64_t* slots = nullptr;
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* decay = nullptr;  // [H] g_h, or null: no decay
  float* s = nullptr;            // [N, H, Dh, Dh]
  float* z = nullptr;            // [N, H, Dh]
};
struct LinearStepArgs : LinearHeadsArgs {
  int64_t stride = 0;    // row b of q, k and v at (q|k|v) + b * stride: [H, Dh]
  float* out = nullptr;  // [B, H, Dh]
};
void LinearAttentionStep(const LinearStepArgs& a);

// Linear attention, `time` tokens per sequence at once: the chunkwise
// parallel form of LinearAttentionImpl (see model/mixers/linear_attention.h), fused.
// Per head, for each block of `block` tokens, with (S, z) as the block found
// them and g = g_h (1 without decay):
//   y_i = (g^(i+1) phi(q_i)^T S + sum_{j<=i} g^(i-j) (phi(q_i) . phi(k_j)) v_j)
//         / (g^(i+1) phi(q_i) . z + sum_{j<=i} g^(i-j) phi(q_i) . phi(k_j) + eps)
// over the block's own tokens j; then S = g^C S + sum_j g^(C-1-j) phi(k_j) v_j^T
// and z alike. The same sums as the op-by-op blocks, with no
// [B, H, block, block] temporaries. State lengths are left to the caller.
struct LinearPrefillArgs : LinearHeadsArgs {
  int64_t time = 0, block = 64;
  // Token j of row b at (q|k|v) + b * row_stride + j * token_stride: [H, Dh].
  int64_t row_stride = 0, token_stride = 0;
  int64_t first_output = 0;  // queries before it are skipped (first_output above)
  float* out = nullptr;      // [B, time - first_output, H, Dh]
};
// `tiles` as for the attention kernels above (AttentionTiles).
void LinearAttentionPrefill(const LinearPrefillArgs& a,
                            AttentionTiles tiles = AttentionTilesForCpu());

// AFT, one token per sequence, for the window form shared by all variants:
//   y = sigmoid(q) * sum_{t'<=t} exp(k_t' + w(t, t-t')) v_t'
//                  / sum_{t'<=t} exp(k_t' + w(t, t-t'))
// with w(t, d) = bias[h][row(t)][d] for d < window and 0 beyond it. State per
// row: c (running max of every key seen, per channel), carried sums of the
// keys that left the window (relative to c), and a ring of the last `window`
// keys as exp(k - c) and exp(k - c) v. The bias row is t (absolute-position
// variants) when bias_rows > 1, else 0.
struct AftStepArgs {
  int64_t batch = 0, channels = 0, window = 0;
  int64_t bias_heads = 1, bias_rows = 1;
  const int64_t* slots = nullptr;
  const int64_t* lengths = nullptr;  // [N]
  // Row b of q, k and v at (q|k|v) + b * stride: [D].
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t stride = 0;
  const float* bias = nullptr;  // [bias_heads, bias_rows, window], or null if window == 0
  float* c = nullptr;           // [N, D]
  float* num = nullptr;         // [N, D]
  float* den = nullptr;         // [N, D]
  float* ring_ek = nullptr;     // [N, window, D]
  float* ring_ekv = nullptr;    // [N, window, D]
  float* out = nullptr;         // [B, D]
};
void AftStep(const AftStepArgs& a);

// AFT, `time` tokens per sequence at once: the parallel form of AftImpl (see
// model/mixers/aft.h), fused. Every row continues its state at position `start`.
// Blocks of `block` tokens; inside a block, query i uses its own prefix max
//   m_i = max(c, k_0 .. k_i)
//   num_i = exp(c - m_i) (num + sum_ring f(t, t') ekv_t')
//           + sum_{j<=i} exp(k_j - m_i) f(t, t_j) v_j     (den alike, no v)
//   y_i = sigmoid(q_i) num_i / den_i,   f = exp(w) in the window, 1 beyond;
// or, where the block's max rises less than 40 above m_0 in every channel,
// the block's max for every query: the same ratio, with one exponential per
// key instead of one per (query, key) pair (aft_prefill_kernel.cc,
// kSharedMaxRise); there the keys at an offset of `window` or more (factor
// 1) form running sums, so a query costs window + 1 key terms. After the
// block the state moves to c = m_last, as AftStep leaves it. The same sums
// as the op-by-op blocks, in one pass per run of channels (runs split each
// bias head evenly across the threads), with no [B, C, C, D] temporaries.
// State lengths are left to the caller.
struct AftPrefillArgs {
  int64_t batch = 0, time = 0, channels = 0, window = 0, block = 64;
  int64_t bias_heads = 1, bias_rows = 1;
  int64_t start = 0;  // tokens every row's state already holds
  const int64_t* slots = nullptr;
  // Token j of row b at (q|k|v) + b * row_stride + j * token_stride: [D].
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t row_stride = 0, token_stride = 0;
  const float* bias = nullptr;  // as AftStepArgs
  float* c = nullptr;
  float* num = nullptr;
  float* den = nullptr;
  float* ring_ek = nullptr;
  float* ring_ekv = nullptr;
  int64_t first_output = 0;  // queries before it are skipped (first_output above)
  float* out = nullptr;      // [B, time - first_output, D]
};
void AftPrefill(const AftPrefillArgs& a);

// AFT with a decayed past (aft-decay, model/mixers/aft_decay.h), `time`
// tokens per row (1 for a decode step), token by token: the recurrence is
// the cheapest exact form, O(window) per token and channel, and channels are
// independent, so tasks are (row, run of channels) with no second phase.
// Per token t of a row and per channel d, with s = window:
//   1. num, den *= decay[d]            (the carried keys age by one step)
//   2. t >= s: the key at t - s leaves the ring and joins num, den with
//      weight exp(k - ref) (w = 0 at distance s); ref rises to that key
//      when it is larger, rescaling the sums, and falls to the sums' own
//      magnitude (ref += log den, den = 1) when den drops below 2^-30, so
//      a long-gone huge key never hides the keys after it;
//   3. k_t, v_t enter the ring at slot t mod s;
//   4. y_t = sigmoid(q_t) (num e^(ref-m) + sum_j e^(k_j + u_h[t-j] - m) v_j)
//                       / (den e^(ref-m) + sum_j e^(k_j + u_h[t-j] - m))
//      over the ring, m the largest exponent, so no term can overflow.
// State lengths are left to the caller.
struct AftDecayArgs {
  int64_t batch = 0, time = 1, channels = 0, window = 0, heads = 1;
  const int64_t* slots = nullptr;
  const int64_t* lengths = nullptr;  // [N] tokens each row holds before the call
  // Token j of row b at (q|k|v) + b * row_stride + j * token_stride: [D].
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t row_stride = 0, token_stride = 0;
  const float* bias = nullptr;   // [heads, window] u_h[delta]
  const float* decay = nullptr;  // [D] exp(-lambda_d)
  float* ref = nullptr;          // [N, D] log reference of num and den (-inf: none yet)
  float* num = nullptr;          // [N, D]
  float* den = nullptr;          // [N, D]
  float* ring_k = nullptr;       // [N, window, D] raw keys, slot = position mod window
  float* ring_v = nullptr;       // [N, window, D] raw values
  int64_t first_output = 0;      // queries before it are skipped (first_output above)
  float* out = nullptr;          // [B, time - first_output, D]
};
void AftDecay(const AftDecayArgs& a);

// Row normalisations of x [rows, d] into out (may alias x), one pass per row:
//   RMSNorm:   out = gain * x / sqrt(mean(x^2) + eps),  gain [d]
//   ScaleNorm: out = gain * x / max(||x||_2, eps),      gain a scalar
// Op by op these cost five to six dispatches and temporaries per norm.
void RmsNormRows(int64_t rows, int64_t d, const float* x, const float* gain, float eps, float* out);
void ScaleNormRows(int64_t rows, int64_t d, const float* x, float gain, float eps, float* out);

// Mamba-2's gated norm (model/mixers/mamba2.h) of y [rows, d]: with g = y *
// silu(z), each group of d / groups channels is RMS-normalised,
//   out = gain * g / sqrt(mean_group(g^2) + eps),   gain [d].
// z's rows are z_stride floats apart (a slice of the input projection).
// Ten LibTorch ops op by op.
void GatedRmsNormRows(int64_t rows, int64_t d, int64_t groups, const float* y, const float* z,
                      int64_t z_stride, const float* gain, float eps, float* out);

// A depthwise causal convolution of width L over T tokens of B rows of C
// channels, continuing each row's last L - 1 inputs:
//   out[b, t, i] = silu(bias[i] + sum_j weight[i, j] in[b, t - L + 1 + j, i])
// where inputs before t = 0 are window[b] [L - 1, C]. in's token rows are
// in_stride floats apart; weight [C, L]; out [B, T, C]. window_out [B, L -
// 1, C] (not window) receives each row's last L - 1 inputs. Tokens in
// parallel.
struct CausalConvArgs {
  int64_t batch = 0, time = 0, channels = 0, width = 0, in_stride = 0;
  const float* in = nullptr;
  const float* window = nullptr;
  const float* weight = nullptr;
  const float* bias = nullptr;
  float* out = nullptr;
  float* window_out = nullptr;
};
void CausalConvSilu(const CausalConvArgs& a);

// RWKV-7's state update over a chunk of T tokens per row
// (model/mixers/rwkv7.h): per head, with S [N, N] (rows: value channels),
//
//   S_t = S_{t-1} (diag(w_t) - kk_t^T (a_t * kk_t)) + v_t^T k_t
//   out_t = S_t r_t
//
// r, w, k, v, kk and a are [B, T, C] (C = heads * head_dim); w is the decay
// factor itself, in (0, 1]. r is read only for tokens t >= first_output,
// as [B, T - first_output, C]. S of batch element b is the state row
// slots[b] of s [rows, heads, head_dim, head_dim], updated in place. out:
// [B, T - first_output, C]. Tokens run in order; rows and heads in parallel.
// With first_output = T the update alone runs: r and out are not read.
// With norm_gain set, out holds the block's output before its gate instead:
// each head's out_t normalised over the head (mean and variance, eps
// norm_eps), times norm_gain plus norm_bias [C], plus the current token's
// bonus (sum_j r_j k_j bonus_j) v (bonus [C]): a dozen LibTorch ops a layer
// that a decode step otherwise runs on one thread.
struct Rwkv7UpdateArgs {
  int64_t batch = 0, time = 0, heads = 0, head_dim = 0;
  int64_t first_output = 0;
  const int64_t* slots = nullptr;
  const float* r = nullptr;
  const float* w = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* kk = nullptr;
  const float* a = nullptr;
  float* s = nullptr;
  float* out = nullptr;
  const float* norm_gain = nullptr;  // optional epilogue, above
  const float* norm_bias = nullptr;
  const float* bonus = nullptr;
  float norm_eps = 0.0f;
};
void Rwkv7Update(const Rwkv7UpdateArgs& a);

// The token shift of RWKV's blocks (model/mixers/rwkv7.h): for each of
// `count` mixes mu_m [C],
//
//   out_m[b, t] = x[b, t] + (x[b, t - 1] - x[b, t]) * mu_m,   x[b, -1] = shift[b]
//
// x [B, T, C], shift [B, C], out [count, B, T, C]. One pass where op by op
// it takes a concatenation, a difference and one product per mix.
struct TokenShiftMixArgs {
  int64_t batch = 0, time = 0, channels = 0, count = 0;
  const float* x = nullptr;
  const float* shift = nullptr;
  const float* const* mixes = nullptr;  // count pointers to [C]
  float* out = nullptr;
};
void TokenShiftMix(const TokenShiftMixArgs& a);

// RWKV-7's per-token activations between its projections and the state
// update (model/mixers/rwkv7.h), over `tokens` rows of C = heads * head_dim
// channels, each [tokens, C] and updated in place:
//
//   w    <- exp(-e^{-1/2} sigmoid(decay_bias + w))     w: W_w2 tanh(W_w1 x^w)
//   v    <- v + (first - v) sigmoid(value_bias + gate)  only where first is set
//   iclr <- sigmoid(iclr_bias + iclr)
//   kk    = per head, (k * kappa) / max(||k * kappa||, 1e-12)   (written, not read)
//   k    <- k (1 + (iclr - 1) alpha)
//
// with kappa = key_norm_scale and alpha = key_iclr_scale [C]. Eighteen
// LibTorch ops a layer otherwise.
struct Rwkv7ActivationsArgs {
  int64_t tokens = 0, heads = 0, head_dim = 0;
  float* w = nullptr;
  float* v = nullptr;
  float* iclr = nullptr;
  float* k = nullptr;
  float* kk = nullptr;
  const float* first = nullptr;  // the first layer's v [tokens, C], or null
  const float* gate = nullptr;   // W_v2 W_v1 x^v [tokens, C], with first
  const float* decay_bias = nullptr;
  const float* value_bias = nullptr;  // with first
  const float* iclr_bias = nullptr;
  const float* key_norm_scale = nullptr;
  const float* key_iclr_scale = nullptr;
  float decay_scale = 0.0f;  // e^{-1/2}
};
void Rwkv7Activations(const Rwkv7ActivationsArgs& a);

// RWKV-4's WKV (model/mixers/rwkv4.h) over T tokens of B rows, C channels:
// k, v [B, T, C]; decay w = -exp(time_decay) and first u [C]; the rows'
// num, den and max [B, C], updated in place. out [B, T - first_output, C]:
// wkv of the tokens from first_output on. Rows and channel blocks in
// parallel.
struct Rwkv4WkvArgs {
  int64_t batch = 0, time = 0, channels = 0;
  int64_t first_output = 0;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* decay = nullptr;
  const float* first = nullptr;
  float* num = nullptr;
  float* den = nullptr;
  float* max = nullptr;
  float* out = nullptr;
};
void Rwkv4Wkv(const Rwkv4WkvArgs& a);

// Mamba-2's state update (model/mixers/mamba2.h) over T tokens of B rows:
// x [B, T, H, P]; b, c [B, T, G, N]; dt [B, T, H]; a_log and d [H]. The
// decay is exp(dt a) with a = -exp(a_log). With dt_bias [H] set, dt arrives
// as the projection's raw output and the step is softplus(dt + dt_bias);
// without it dt is the step itself. x, b and c of token i (= b * T + t)
// start xbc_stride floats apart (0: contiguous, H * P and G * N apart), dt's
// dt_stride apart (0: H), so that both can be read from the input
// projection and the convolution's output in place. S of batch element b
// is row slots[b] (b when slots is null) of s [rows, H, P, N], updated in
// place. out [B, T - first_output, H * P]: y = S C + D x of the tokens
// from first_output on. Rows and heads in parallel.
//
// `block` picks the form: 0 scans token by token, reading and rewriting S
// for each token; B > 0 takes the chunked form of the SSD paper's section 6
// in blocks of B tokens (model/mixers/mamba2.h writes it out), as register-
// tiled products with S kept in registers across a block, tiled as
// `tiles` says (AttentionTiles above); -1 chooses by T: token by token
// below 16 tokens (a step, a speculation round), blocks of 64 from there. Both forms give the
// same results up to float rounding.
struct Mamba2ScanArgs {
  int64_t batch = 0, time = 0, heads = 0, head_dim = 0, state_size = 0, groups = 1;
  int64_t first_output = 0;
  int64_t xbc_stride = 0, dt_stride = 0;
  const int64_t* slots = nullptr;
  const float* x = nullptr;
  const float* b = nullptr;
  const float* c = nullptr;
  const float* dt = nullptr;
  const float* dt_bias = nullptr;
  const float* a_log = nullptr;
  const float* d = nullptr;
  float* s = nullptr;
  float* out = nullptr;
  int64_t block = -1;
};
void Mamba2Scan(const Mamba2ScanArgs& a, AttentionTiles tiles = AttentionTilesForCpu());

}  // namespace attn::kernels
