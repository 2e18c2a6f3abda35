// The arithmetic of the step kernels (state_kernels.cu) for one lane of a
// warp, shared with the CPU check of their indexing
// (tests/cuda_step_math_test.cc), which sums the 32 lanes' parts in place of
// the warp's shuffles. A block serves one (row, head), block = row * heads +
// head; a warp one channel of S at a time; lane l the state columns l,
// l + 32, ...
#pragma once

#include <math.h>  // expf, in host and device code alike

#include <cstdint>

#include "model/cuda/state_kernels.h"

#ifdef __CUDACC__
#define ATTN_HOST_DEVICE __host__ __device__
#else
#define ATTN_HOST_DEVICE
#endif

namespace attn::cuda {

inline constexpr int kWarp = 32;

// Where `block`'s (row, head) matrix of `floats` floats starts in a step's
// state: at the pool's row slots[row] where there are slots, else at row.
ATTN_HOST_DEVICE inline int64_t StateMatrixAt(const int64_t* slots, int64_t block, int64_t heads,
                                              int64_t floats) {
  const int64_t row = block / heads, head = block % heads;
  return ((slots != nullptr ? slots[row] : row) * heads + head) * floats;
}

// Mamba-2: `block`'s x_p, wherever its rows sit.
ATTN_HOST_DEVICE inline float Mamba2X(const Mamba2StepArgs& a, int64_t block, int64_t p) {
  const int64_t row = block / a.heads, head = block % a.heads;
  const int64_t stride = a.x_stride > 0 ? a.x_stride : a.heads * a.head_dim;
  return a.x[row * stride + head * a.head_dim + p];
}

// Mamba-2: `block`'s step size, softplus(dt + dt_bias) where the bias is
// given (as torch's softplus, linear past 20), else dt as it is.
ATTN_HOST_DEVICE inline float Mamba2Dt(const Mamba2StepArgs& a, int64_t block) {
  const int64_t row = block / a.heads, head = block % a.heads;
  const float dt = a.dt[row * (a.dt_stride > 0 ? a.dt_stride : a.heads) + head];
  if (a.dt_bias == nullptr) return dt;
  const float z = dt + a.dt_bias[head];
  return z > 20.f ? z : log1pf(expf(z));
}

// Mamba-2: updates lane's columns of S's row p and returns their part of
// (S C)_p.
ATTN_HOST_DEVICE inline float Mamba2LanePart(const Mamba2StepArgs& a, int64_t block, int64_t p,
                                             int lane) {
  const int64_t row = block / a.heads, head = block % a.heads;
  const int64_t group = head / (a.heads / a.groups);
  const float dt = Mamba2Dt(a, block);
  const float decay = expf(-expf(a.a_log[head]) * dt);
  const int64_t bc_row = row * (a.bc_stride > 0 ? a.bc_stride : a.groups * a.state_size);
  const float* b = a.b + bc_row + group * a.state_size;
  const float* c = a.c + bc_row + group * a.state_size;
  const float dtx = dt * Mamba2X(a, block, p);
  const int64_t at =
      StateMatrixAt(a.slots, block, a.heads, a.head_dim * a.state_size) + p * a.state_size;
  const float* s_in = a.s_in + at;
  float* s_out = a.s_out + at;
  float part = 0.f;
  for (int64_t n = lane; n < a.state_size; n += kWarp) {
    const float updated = s_in[n] * decay + dtx * b[n];
    s_out[n] = updated;
    part += updated * c[n];
  }
  return part;
}

// Mamba-2: y_p from the lanes' summed parts.
ATTN_HOST_DEVICE inline void Mamba2Output(const Mamba2StepArgs& a, int64_t block, int64_t p,
                                          float sum) {
  a.y[block * a.head_dim + p] = sum + a.d[block % a.heads] * Mamba2X(a, block, p);
}

// RWKV-7: lane's part of (S kk)_i, which must be whole before S changes.
ATTN_HOST_DEVICE inline float Rwkv7RemovedPart(const Rwkv7StepArgs& a, int64_t block, int64_t i,
                                               int lane) {
  const int64_t n = a.head_dim, head0 = block * n;
  const float* s_in = a.s_in + StateMatrixAt(a.slots, block, a.heads, n * n) + i * n;
  float part = 0.f;
  for (int64_t j = lane; j < n; j += kWarp) part += s_in[j] * a.kk[head0 + j];
  return part;
}

// RWKV-7: updates lane's columns of S's row i, given all of (S kk)_i, and
// returns their part of o_i = (S r)_i.
ATTN_HOST_DEVICE inline float Rwkv7UpdatePart(const Rwkv7StepArgs& a, int64_t block, int64_t i,
                                              int lane, float removed) {
  const int64_t n = a.head_dim, head0 = block * n;
  const int64_t row_i = StateMatrixAt(a.slots, block, a.heads, n * n) + i * n;
  const float* s_in = a.s_in + row_i;
  float* s_out = a.s_out + row_i;
  const float v = a.v[head0 + i];
  float part = 0.f;
  for (int64_t j = lane; j < n; j += kWarp) {
    const int64_t at = head0 + j;
    const float updated = s_in[j] * a.w[at] - removed * a.kk[at] * a.iclr[at] + v * a.k[at];
    s_out[j] = updated;
    if (a.r != nullptr) part += updated * a.r[at];
  }
  return part;
}

// RWKV-7's scan: token t's step, on S in place (a warp's rows of S depend
// on no other warp's, and each lane reads and writes only its own
// columns), r null before the first output.
ATTN_HOST_DEVICE inline Rwkv7StepArgs Rwkv7TokenArgs(const Rwkv7ScanArgs& a, int64_t t) {
  const int64_t token = t * a.batch * a.heads * a.head_dim;
  Rwkv7StepArgs step;
  step.batch = a.batch, step.heads = a.heads, step.head_dim = a.head_dim;
  const int64_t output = t - a.first_output;
  step.r = output >= 0 && a.r != nullptr ? a.r + output * a.batch * a.heads * a.head_dim : nullptr;
  step.w = a.w + token, step.k = a.k + token, step.v = a.v + token;
  step.kk = a.kk + token, step.iclr = a.iclr + token;
  step.s_in = a.s, step.s_out = a.s;
  return step;
}

// Where the scan writes o_i of `block`'s row and head for token t
// (t >= first_output): o is [batch, time - first_output, C].
ATTN_HOST_DEVICE inline int64_t Rwkv7ScanOutputAt(const Rwkv7ScanArgs& a, int64_t block, int64_t t,
                                                  int64_t i) {
  const int64_t row = block / a.heads, head = block % a.heads, c = a.heads * a.head_dim;
  return (row * (a.time - a.first_output) + t - a.first_output) * c + head * a.head_dim + i;
}

// RWKV-4: row's channel over every token, its num, den and max held in
// registers and written back at the end. A thread per (row, channel).
ATTN_HOST_DEVICE inline void Rwkv4Channel(const Rwkv4WkvArgs& a, int64_t row, int64_t channel) {
  const int64_t c = a.channels, at = row * c + channel, outputs = a.time - a.first_output;
  const float w = a.decay[channel], u = a.first[channel];
  float num = a.num[at], den = a.den[at], p = a.max[at];
  for (int64_t t = 0; t < a.time; ++t) {
    const float k = a.k[(row * a.time + t) * c + channel],
                v = a.v[(row * a.time + t) * c + channel];
    if (t >= a.first_output) {
      const float q = fmaxf(p, u + k), past = expf(p - q), now = expf(u + k - q);
      a.out[(row * outputs + t - a.first_output) * c + channel] =
          (past * num + now * v) / (past * den + now);
    }
    const float q = fmaxf(p + w, k), past = expf(p + w - q), now = expf(k - q);
    num = past * num + now * v;
    den = past * den + now;
    p = q;
  }
  a.num[at] = num, a.den[at] = den, a.max[at] = p;
}

// Linear attention: a block per (row, head) with a thread per channel, in
// two phases. Phase one, thread c: phi(q)_c and phi(k)_c into shared[c] and
// shared[N + c], z_c updated and phi(q)_c z_c into shared[2 N + c]; phase
// two, after the block's barrier, thread e updates column e of S and writes
// y_e. A thread per channel reads each head's features whole for the
// maximum of exp_feature: N reads, against the N^2 of S.
ATTN_HOST_DEVICE inline float LinearFeature(const float* x, int64_t n, int64_t c,
                                            bool exp_feature) {
  if (!exp_feature) return x[c] > 0.f ? x[c] + 1.f : expf(x[c]);  // elu(x) + 1
  float top = x[0];
  for (int64_t i = 1; i < n; ++i) top = fmaxf(top, x[i]);
  return expf(x[c] - top);
}

// The state row of `block`'s sequence.
ATTN_HOST_DEVICE inline int64_t LinearStateHead(const LinearStepArgs& a, int64_t block) {
  const int64_t row = block / a.heads;
  return (a.slots != nullptr ? a.slots[row] : row) * a.heads + block % a.heads;
}

ATTN_HOST_DEVICE inline void LinearKeyChannel(const LinearStepArgs& a, int64_t block, int64_t c,
                                              float* shared) {
  const int64_t n = a.head_dim, d = a.heads * n, row = block / a.heads, head = block % a.heads;
  const float* q = a.qkv + row * 3 * d + head * n;
  const float phi_q = LinearFeature(q, n, c, a.exp_feature);
  const float phi_k = LinearFeature(q + d, n, c, a.exp_feature);
  const float g = a.decay != nullptr ? a.decay[head] : 1.f;
  float* z = a.z + LinearStateHead(a, block) * n;
  z[c] = g * z[c] + phi_k;
  shared[c] = phi_q;
  shared[n + c] = phi_k;
  shared[2 * n + c] = phi_q * z[c];
}

ATTN_HOST_DEVICE inline void LinearValueColumn(const LinearStepArgs& a, int64_t block, int64_t e,
                                               const float* shared) {
  const int64_t n = a.head_dim, d = a.heads * n, row = block / a.heads, head = block % a.heads;
  const float v = a.qkv[row * 3 * d + 2 * d + head * n + e];
  const float g = a.decay != nullptr ? a.decay[head] : 1.f;
  float* s = a.s + LinearStateHead(a, block) * n * n;
  float den = a.eps, num = 0.f;
  for (int64_t c = 0; c < n; ++c) den += shared[2 * n + c];
  for (int64_t c = 0; c < n; ++c) {
    const float updated = g * s[c * n + e] + shared[n + c] * v;
    s[c * n + e] = updated;
    num += shared[c] * updated;
  }
  a.out[row * d + head * n + e] = num / den;
}

// aft-decay: thread (row, d) reads and writes only channel d of its row's
// state, so the step needs no barrier (the caller advances the lengths
// after it: every thread of a row reads its length). Two passes over the ring: its
// largest exponent, then the sums relative to it (each term at most 1).
ATTN_HOST_DEVICE inline void AftDecayChannel(const AftDecayStepArgs& a, int64_t row, int64_t d) {
  const int64_t channels = a.channels, s = a.window;
  const int64_t slot = a.slots != nullptr ? a.slots[row] : row;
  const int64_t t = a.lengths[slot];
  const float* u = a.bias + d / (channels / a.heads) * s;
  const float* qkv = a.qkv + row * 3 * channels;
  const float q = qkv[d], k = qkv[channels + d], v = qkv[2 * channels + d];
  float* ring_k = a.ring_k + slot * s * channels + d;
  float* ring_v = a.ring_v + slot * s * channels + d;
  const int64_t at = slot * channels + d;
  const float lambda = -logf(a.decay[d]);
  const float own_logit = k + u[0], carried_ref = a.ref[at] - lambda;
  float m = fmaxf(own_logit, carried_ref);
  for (int64_t j = 0; j < s; ++j) {
    const int64_t delta = ((t - 1 - j) % s + s) % s + 1;
    if (delta <= t) m = fmaxf(m, ring_k[j * channels] + (delta < s ? u[delta] : 0.f));
  }
  const float own = expf(own_logit - m), carried = expf(carried_ref - m);
  float num = own * v + carried * a.num[at], den = own + carried * a.den[at];
  for (int64_t j = 0; j < s; ++j) {
    const int64_t delta = ((t - 1 - j) % s + s) % s + 1;
    if (delta > t) continue;
    const float weight = expf(ring_k[j * channels] + (delta < s ? u[delta] : 0.f) - m);
    num += weight * ring_v[j * channels];
    den += weight;
  }
  a.out[row * channels + d] = num / den / (1.f + expf(-q));
  const int64_t leaving = t % s;
  if (t >= s) {
    const float joining = ring_k[leaving * channels];
    const float new_ref = fmaxf(carried_ref, joining);
    const float old_scale = expf(carried_ref - new_ref), e = expf(joining - new_ref);
    a.num[at] = a.num[at] * old_scale + e * ring_v[leaving * channels];
    a.den[at] = a.den[at] * old_scale + e;
    a.ref[at] = new_ref;
  } else {
    a.ref[at] = carried_ref;
  }
  ring_k[leaving * channels] = k;
  ring_v[leaving * channels] = v;
}

// AFT: thread (row, d) as for aft-decay. Only the slots that hold a key
// are read (t of them while t < s), so aft-full's window of max_context
// costs what the sequence holds.
ATTN_HOST_DEVICE inline void AftChannel(const AftStepArgs& a, int64_t row, int64_t d) {
  const int64_t channels = a.channels, s = a.window;
  const int64_t slot = a.slots != nullptr ? a.slots[row] : row;
  const int64_t t = a.lengths[slot], at = slot * channels + d;
  const float q = a.q[row * a.stride + d], k = a.k[row * a.stride + d];
  const float v = a.v[row * a.stride + d];
  const float* u = nullptr;
  if (s > 0) {
    // A row past the table is a CUDA graph's spare row, run on past the
    // context (model/backend/step_graphs.h): it reads the last row.
    const int64_t group = d / (channels / a.bias_heads);
    const int64_t table_row = t < a.bias_rows ? t : a.bias_rows - 1;
    u = a.bias + (group * a.bias_rows + table_row) * s;
  }
  const float m = fmaxf(a.c[at], k), scale = expf(a.c[at] - m), ek = expf(k - m);
  const float own = s > 0 ? expf(u[0]) : 1.f;
  float* ring_ek = a.ring_ek + slot * s * channels + d;
  float* ring_ekv = a.ring_ekv + slot * s * channels + d;
  const int64_t held = t < s ? t : s;
  float ring_num = 0.f, ring_den = 0.f;
  for (int64_t j = 0; j < held; ++j) {
    const int64_t delta = ((t - 1 - j) % s + s) % s + 1;
    const float factor = delta < s ? expf(u[delta]) : 1.f;
    ring_num += factor * ring_ekv[j * channels];
    ring_den += factor * ring_ek[j * channels];
  }
  const float num = scale * (a.num[at] + ring_num) + ek * own * v;
  const float den = scale * (a.den[at] + ring_den) + ek * own;
  a.out[row * channels + d] = num / den / (1.f + expf(-q));
  a.num[at] *= scale;
  a.den[at] *= scale;
  a.c[at] = m;
  if (s == 0) {  // no window: the key joins the sums at once
    a.num[at] += ek * v;
    a.den[at] += ek;
    return;
  }
  const int64_t leaving = t % s;
  if (t >= s) {
    a.num[at] += scale * ring_ekv[leaving * channels];
    a.den[at] += scale * ring_ek[leaving * channels];
  }
  for (int64_t j = 0; j < held; ++j) {
    ring_ek[j * channels] *= scale;
    ring_ekv[j * channels] *= scale;
  }
  ring_ek[leaving * channels] = ek;
  ring_ekv[leaving * channels] = ek * v;
}

// Attention: thread (row, kv head, channel e) of the append writes the
// row's new key and value at its length.
ATTN_HOST_DEVICE inline void AttentionAppend(const AttentionStepArgs& a, int64_t row,
                                             int64_t kv_head, int64_t e) {
  const int64_t slot = a.slots != nullptr ? a.slots[row] : row, t = a.lengths[slot];
  if (t >= a.capacity) return;
  const int64_t at = ((slot * a.kv_heads + kv_head) * a.capacity + t) * a.head_dim + e;
  const int64_t from = row * a.stride + kv_head * a.head_dim + e;
  a.k_cache[at] = a.k[from];
  a.v_cache[at] = a.v[from];
}

// Attention, block = row * heads + head: the row's length, or -1 for a row
// past the cache, whose output is zeros.
ATTN_HOST_DEVICE inline int64_t AttentionLength(const AttentionStepArgs& a, int64_t block) {
  const int64_t row = block / a.heads;
  const int64_t t = a.lengths[a.slots != nullptr ? a.slots[row] : row];
  return t < a.capacity ? t : -1;
}

// Cache position j of the block's key/value head.
ATTN_HOST_DEVICE inline int64_t AttentionCacheAt(const AttentionStepArgs& a, int64_t block,
                                                 int64_t j) {
  const int64_t row = block / a.heads, head = block % a.heads;
  const int64_t slot = a.slots != nullptr ? a.slots[row] : row;
  const int64_t kv_head = head / (a.heads / a.kv_heads);
  return ((slot * a.kv_heads + kv_head) * a.capacity + j) * a.head_dim;
}

// Lane's part of position j's dot products, content and (with r) position,
// for a row at length t.
ATTN_HOST_DEVICE inline float AttentionDotPart(const AttentionStepArgs& a, int64_t block, int64_t t,
                                               int64_t j, int lane) {
  const int64_t n = a.head_dim, head = block % a.heads;
  const float* q = a.q + block / a.heads * a.stride + head * n;
  const float* key = a.k_cache + AttentionCacheAt(a, block, j);
  float part = 0.f;
  for (int64_t e = lane; e < n; e += kWarp) {
    const float u = a.content_bias != nullptr ? a.content_bias[head * n + e] : 0.f;
    part += (q[e] + u) * key[e];
    if (a.r != nullptr) {
      part += (q[e] + a.position_bias[head * n + e]) * a.r[(head * a.capacity + t - j) * n + e];
    }
  }
  return part;
}

// Position j's score from its whole dot product.
ATTN_HOST_DEVICE inline float AttentionScore(const AttentionStepArgs& a, int64_t block, int64_t t,
                                             int64_t j, float dot) {
  const float slope = a.log_slopes != nullptr ? expf(a.log_slopes[block % a.heads]) : 0.f;
  return a.scale * dot - slope * static_cast<float>(t - j);
}

// One warp's softmax over the positions it takes, online: the largest
// score so far, the weights' sum and the lane's channels' weighted values,
// all relative to it.
inline constexpr int kAttentionLaneChannels = static_cast<int>(kMaxAttentionHeadDim / kWarp);
struct SoftmaxRun {
  float max = -INFINITY, sum = 0.f;
  float values[kAttentionLaneChannels] = {};
};

// Takes position j, of `score`, into the lane's run.
ATTN_HOST_DEVICE inline void AttentionTake(const AttentionStepArgs& a, int64_t block, int64_t j,
                                           int lane, float score, SoftmaxRun* run) {
  const float max = fmaxf(run->max, score);
  const float rescale = expf(run->max - max), weight = expf(score - max);
  const float* value = a.v_cache + AttentionCacheAt(a, block, j);
  run->sum = run->sum * rescale + weight;
  for (int i = 0; i < kAttentionLaneChannels; ++i) {
    const int64_t e = lane + static_cast<int64_t>(i) * kWarp;
    if (e < a.head_dim) run->values[i] = run->values[i] * rescale + weight * value[e];
  }
  run->max = max;
}

// Position j's span of the split `split` of a row at length t: positions
// [begin, end), the splits' spans in order covering 0..t.
ATTN_HOST_DEVICE inline void AttentionSpan(const AttentionStepArgs& a, int64_t t, int64_t split,
                                           int64_t* begin, int64_t* end) {
  const int64_t span = (t + a.splits) / a.splits;  // ceil((t + 1) / splits)
  *begin = split * span;
  *end = *begin + span < t + 1 ? *begin + span : t + 1;
}

// Several runs merged, for channel e: relative to their largest maximum,
// the weights' sum and channel e's weighted values (not yet divided). A
// run that took no position (sum 0) adds nothing.
struct MergedRun {
  float max = -INFINITY, sum = 0.f, value = 0.f;
};
ATTN_HOST_DEVICE inline MergedRun AttentionMerge(const float* maxes, const float* sums,
                                                 const float* values, int count, int64_t head_dim,
                                                 int64_t e) {
  MergedRun merged;
  for (int w = 0; w < count; ++w) merged.max = fmaxf(merged.max, maxes[w]);
  for (int w = 0; w < count; ++w) {
    if (sums[w] == 0.f) continue;
    const float scale = expf(maxes[w] - merged.max);
    merged.value += scale * values[w * head_dim + e];
    merged.sum += scale * sums[w];
  }
  return merged;
}

// A split block's partial result (splits > 1): maxima and sums [blocks,
// splits], then values [blocks, splits, head_dim], in `partial`.
ATTN_HOST_DEVICE inline float* AttentionPartialMaxes(const AttentionStepArgs& a, int64_t block) {
  return a.partial + block * a.splits;
}
ATTN_HOST_DEVICE inline float* AttentionPartialSums(const AttentionStepArgs& a, int64_t block) {
  return a.partial + (a.batch * a.heads + block) * a.splits;
}
ATTN_HOST_DEVICE inline float* AttentionPartialValues(const AttentionStepArgs& a, int64_t block) {
  return a.partial + 2 * a.batch * a.heads * a.splits + block * a.splits * a.head_dim;
}

// Channel e of split `split` of the block from its warps' runs: the output
// itself where there is one split, else the split's partial run.
ATTN_HOST_DEVICE inline void AttentionSplitResult(const AttentionStepArgs& a, int64_t block,
                                                  int64_t split, int64_t e, const float* maxes,
                                                  const float* sums, const float* values,
                                                  int warps) {
  const MergedRun run = AttentionMerge(maxes, sums, values, warps, a.head_dim, e);
  if (a.splits == 1) {
    a.out[block * a.head_dim + e] = run.value / run.sum;
    return;
  }
  if (e == 0) {
    AttentionPartialMaxes(a, block)[split] = run.max;
    AttentionPartialSums(a, block)[split] = run.sum;
  }
  AttentionPartialValues(a, block)[split * a.head_dim + e] = run.value;
}

// Channel e of the block's output from its splits' partial runs.
ATTN_HOST_DEVICE inline void AttentionMergeSplits(const AttentionStepArgs& a, int64_t block,
                                                  int64_t e) {
  const MergedRun run =
      AttentionMerge(AttentionPartialMaxes(a, block), AttentionPartialSums(a, block),
                     AttentionPartialValues(a, block), static_cast<int>(a.splits), a.head_dim, e);
  a.out[block * a.head_dim + e] = run.value / run.sum;
}

}  // namespace attn::cuda
