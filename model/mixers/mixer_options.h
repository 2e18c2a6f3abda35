// What selects and sizes a sequence mixer: its kind, by name, and the
// options every kind is built with (model/mixers/mixer.h builds them). No
// LibTorch here, so configurations can be parsed and checked without it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attn {

enum class MixerKind {
  kMha,          // softmax multi-head attention with a key/value cache
  kMhaAlibi,     // the same with ALiBi distance biases, no position embedding
  kRelative,     // Transformer-XL relative multi-head attention
  kLinearElu,    // linear attention, feature map elu(x) + 1
  kLinearExp,    // linear attention, feature map exp(x - max_i x_i)
  kLinearDecay,  // linear attention, elu+1, with a learned per-head decay of the state
  kAftFull,      // attention-free transformer, learned T x T bias
  kAftLocal,     // AFT with a learned bias inside a band of width s
  kAftSimple,    // AFT without position bias
  kAftConv,      // AFT with a per-head bias that depends only on t - t'
  kAftDecay,     // AFT-conv's filter in a window, a learned per-channel decay beyond
  kRwkv7,        // an RWKV-7 block: delta-rule linear attention with a data-dependent decay
  kRwkv4,        // an RWKV-4 block: AFT with a per-channel decay and a bonus for the current token
  kMamba2,       // a Mamba-2 block: a state-space recurrence with a per-head scalar decay
  kShortConv,    // LFM2's double-gated short convolution
  kGqa,          // grouped-query attention with rotary positions and a key/value cache
};

// Returns the configuration name of `kind` ("mha", "aft-conv", ...).
std::string MixerKindName(MixerKind kind);
// Parses a configuration name; returns false for an unknown name.
bool ParseMixerKind(const std::string& name, MixerKind* kind);
// All kinds, in declaration order.
const std::vector<MixerKind>& AllMixerKinds();

// The fastest block size of a kind's parallel form on CPU: 16 for AFT, whose
// blocks are elementwise [batch, C, C, d] work that grows with C squared, 64
// for the rest, whose blocks are matrix products. The block size never
// changes the result.
int64_t DefaultChunk(MixerKind kind);

// Whether a mixer of `kind` is a whole block (a WholeBlockMixer,
// model/mixers/whole_block.h):
// it brings its own norms, residuals and channel mixing, so a layer of a
// language model is that mixer alone.
bool IsWholeBlock(MixerKind kind);

// RWKV-7's low-rank sizes (model/mixers/rwkv7.h) for width `d_model`, as
// the RWKV-7 paper's reference trainer chooses them: the decay's and the
// in-context rate's round(1.8 sqrt(d) / 32) * 32, the value residual's
// round(1.3 sqrt(d) / 32) * 32, the gate's round(0.6 d^0.8 / 32) * 32, each
// at least 32.
struct Rwkv7Ranks {
  int64_t decay = 0;
  int64_t iclr = 0;
  int64_t value = 0;
  int64_t gate = 0;
};
Rwkv7Ranks DefaultRwkv7Ranks(int64_t d_model);

// Mamba-2's sizes besides d_model and heads (model/mixers/mamba2.h): the
// state per head is [P, N] with P = expand * d_model / heads.
struct Mamba2Sizes {
  int64_t state_size = 64;  // N, the width of B and C
  int64_t conv_kernel = 4;  // W, the causal convolution's width
  int64_t expand = 2;       // inner width = expand * d_model
  int64_t groups = 1;       // G: heads share B and C in G groups
};

// Everything needed to build any mixer. Fields a kind does not use are
// ignored by it.
struct MixerOptions {
  MixerKind kind = MixerKind::kAftConv;
  int64_t d_model = 256;
  int64_t heads = 4;
  // Longest sequence a mixer with a growing state (mha, relative, aft-full)
  // or an absolute-position bias (aft-local, aft-full) can process.
  int64_t max_context = 2048;
  // Width s of the AFT-local / AFT-conv / AFT-decay band: keys with t - t' < s get a
  // learned bias, keys further back still contribute with bias 0.
  int64_t window = 32;
  // Transformer-XL: positions of segment memory carried between segments.
  int64_t mem_len = 128;
  // Whether ALiBi slopes are trained (in log space) or fixed.
  bool learn_alibi_slopes = false;
  // Denominator guard of linear attention.
  double linear_eps = 1e-6;
  // Tokens per block of the chunked parallel forms.
  int64_t chunk = 64;
  // Whether step() (every kind) and prefill() (AFT) use the fused CPU loops
  // of model/kernels/kernels.h when they can: CPU float tensors, nothing to
  // differentiate. Off, step() runs prefill() one row at a time and prefill()
  // runs the op-by-op blocks: slower, same numbers; the path any non-CPU
  // device takes.
  bool fused_kernels = true;

  // The layer's index in its model. RWKV-7's first layer normalises the
  // embedding (ln0) and its values become every later layer's value
  // residual (LayerCarry in model/mixers/whole_block.h).
  int64_t layer = 0;
  // RWKV-7: the channel mix's hidden width, the low-rank sizes, and the eps
  // of the group norm over each head's output (64e-5 in the released models).
  int64_t ff_hidden = 1024;
  Rwkv7Ranks rwkv7_ranks = DefaultRwkv7Ranks(256);
  double group_norm_eps = 64e-5;
  // RWKV-4: with R > 0, a block whose layer + 1 is a multiple of R halves
  // its output (Hugging Face's rescale_every; the checkpoint's output
  // weights are then divided by 2^(layer / R), see docs/hf-models.md). Its
  // ff_hidden is the channel mix's width.
  int64_t rescale_every = 0;
  Mamba2Sizes mamba2;
  // short-conv: the convolution's width L.
  int64_t conv_kernel = 3;
  // gqa: key/value heads (0: heads), whether queries and keys are rotated
  // (false: no positions at all, Granite's "nope"), the rotary base, and
  // whether each head's queries and keys pass an RMSNorm of eps norm_eps.
  int64_t kv_heads = 0;
  bool rope = true;
  double rope_theta = 10000.0;
  bool qk_norm = false;
  double norm_eps = 1e-5;
};

// RWKV-4's running exponent p of an empty sequence (model/mixers/rwkv4.h):
// far below any exponent a token brings.
inline constexpr float kRwkv4EmptyMax = -1e38f;

}  // namespace attn
