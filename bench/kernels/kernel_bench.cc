// The int8 weight product (model/kernels/int8_gemm.h) and the packed float32
// product (model/kernels/packed_gemm.h, on this CPU's path) against
// LibTorch's float32 product (OpenBLAS's addmv for one row, addmm for more),
// on the bundled models' matrices: d_model 160,
// ff_hidden 640, 4 layers, a 4096-token tied head. Per token that is 1.88M
// weights: 7.5 MB as float32, 1.9 MB as int8.
//
//   attn-kernel-bench [--reps=N] [--threads=N] [--rows=1,2,4]
//                     [--d_model=160 --ff_hidden=640 --layers=4 --vocab=4096]
//
// The shape flags time a larger model's products: one whose weights do not
// fit in the caches reads them from memory, where int8's quarter of the
// bytes pays in full.
//
// For each row count it runs one token's products (every layer's four
// projections and the head) through LibTorch, packed and in int8, in turn,
// `reps` times, and prints the median of each, their ratios, and the bytes of
// weights read per second, after the bandwidth a plain parallel read reaches
// over buffers of the same sizes. Alternating in one process is what makes
// the ratio meaningful on a machine whose speed drifts between runs.
//
// It also prints the physical limits the table is read against: how fast one
// thread multiplies int8 weights that sit in its cache (so no
// memory is in the way), the one-row bound that follows for int8 and for
// float32 (whose weights come from the read bandwidth), and for many rows,
// where every weight serves all rows and bytes no longer matter, the CPU's
// float32 multiply-add peak (independent chains on every thread) and
// LibTorch's matrix product on large matrices.
//
//   attn-kernel-bench --attention=121x2800,512x0 [--reps=N]
//
// times the fused causal prefill attention instead (kernels.h,
// CausalAttentionPrefill) on LFM2-350M's attention shape (16 query heads,
// 8 key/value heads of 64): CHUNKxCACHED is a chunk of CHUNK new tokens over
// CACHED cached ones, as in a chat turn whose earlier turns the state cache
// holds. Prints the median time and the rate of its multiply-adds for each
// register tiling (kernels.h, AttentionTiles: AVX-512's and AVX2's), the
// two alternating; this CPU's own is marked.
//
//   attn-kernel-bench --attention_step=51x250 [--reps=N]
//
// times the attention of one decode step of LFM2-350M's six attention
// layers instead: ROWSxCONTEXT is ROWS rows of CONTEXT cached keys, each
// layer's cache of its own (as in a server: past the L3 at 51x250). The new
// keys and values are put in the caches first (AppendToCache) or by the
// step (CachedAttentionArgs::append), the two alternating.
//
//   attn-kernel-bench --swiglu=51,186 [--reps=N]
//
// times SwiGLU's gating of that many rows of LFM2-350M's 4,608-wide hidden
// layer: LibTorch's silu and product against kernels::SiluMulInPlace (which
// first copies its input back, as it works in place), alternating; the rate
// counts 4 operations an element.
//
//   attn-kernel-bench --linear=512,4096 [--reps=N]
//
// times the fused linear attention prefill (LinearAttentionPrefill) likewise,
// on the bundled linear models' shape (4 heads of 40, blocks of 64, a decay),
// for prompts of the given lengths.
//
//   attn-kernel-bench --mamba2=16,64,512 [--reps=N]
//
// times Mamba-2's scan (Mamba2Scan) on mamba2-130m's heads and Granite
// 4.0-H 350M's over chunks of the given lengths: token by token, and chunked with
// each tiling.
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "model/kernels/cpu_features.h"
#include "model/kernels/huge_pages.h"
#include "model/kernels/int8_gemm.h"
#include "model/kernels/kernels.h"
#include "model/kernels/packed_gemm.h"
#include "util/cpus.h"

ABSL_FLAG(int, reps, 400, "Alternating repetitions per row count (medians are reported).");
ABSL_FLAG(int, threads, 0, "Intra-op threads; 0: the usable CPUs.");
ABSL_FLAG(int64_t, d_model, 160, "Model width of the matrices (the bundled models': 160).");
ABSL_FLAG(int64_t, ff_hidden, 640, "Feed-forward width (the bundled models': 640).");
ABSL_FLAG(int64_t, layers, 4, "Layers (the bundled models': 4).");
ABSL_FLAG(int64_t, vocab, 4096, "Rows of the tied head (the bundled models': 4096).");
ABSL_FLAG(std::string, rows, "1,2,4,8,16,32,48,64", "Row counts to time.");
ABSL_FLAG(std::string, attention, "",
          "CHUNKxCACHED,...: time the causal prefill attention at these shapes instead.");
ABSL_FLAG(std::string, attention_step, "",
          "ROWSxCONTEXT,...: time a decode step's attention at these shapes instead.");
ABSL_FLAG(std::string, swiglu, "", "ROWS,...: time SwiGLU's gating of these rows instead.");
ABSL_FLAG(std::string, linear, "",
          "TOKENS,...: time the linear attention prefill of these lengths instead.");
ABSL_FLAG(std::string, mamba2, "",
          "TOKENS,...: time Mamba-2's scan over chunks of these lengths instead.");

namespace attn {
namespace {

struct Matrix {
  int64_t out, in;
  torch::Tensor weight, bias;  // float32
  kernels::Int8Panels panels;
  std::vector<float> scale;
  std::vector<float, kernels::HugePageAllocator<float>> packed;  // PackWeight's layout
};

Matrix RandomMatrix(int64_t out, int64_t in) {
  Matrix m{out, in, torch::randn({out, in}) * 0.05, torch::randn({out}) * 0.1, {}, {}, {}};
  std::vector<int8_t> q(out * in);
  m.scale.resize(out);
  kernels::QuantizeRows(m.weight.data_ptr<float>(), out, in, in, q.data(), m.scale.data());
  m.panels = kernels::PackInt8Panels(q.data(), out, in);
  m.packed.resize(kernels::PackedWeightSize(out, in));
  kernels::PackWeight(m.weight.data_ptr<float>(), out, in, in, m.packed.data());
  return m;
}

std::vector<Matrix> ModelMatrices() {
  const int64_t d = absl::GetFlag(FLAGS_d_model), ff = absl::GetFlag(FLAGS_ff_hidden);
  const int64_t vocab = absl::GetFlag(FLAGS_vocab), layers = absl::GetFlag(FLAGS_layers);
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int64_t l = 0; l < layers; ++l) {
    shapes.insert(shapes.end(), {{3 * d, d}, {d, d}, {ff, d}, {d, ff}});
  }
  shapes.push_back({vocab, d});
  std::vector<Matrix> matrices;
  torch::manual_seed(1);
  for (const auto& [out, in] : shapes) matrices.push_back(RandomMatrix(out, in));
  return matrices;
}

double Seconds(const std::chrono::steady_clock::time_point& start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One token's products at `rows` rows, float32 through LibTorch. Each
// matrix has inputs of its own, [rows, in] and contiguous as a model's
// activations are: the row stride decides how a tile's inputs fall in the
// cache (packed_gemm.cc), so one input of the widest width for all would
// time another product than a model's.
void FloatToken(std::vector<Matrix>& matrices, const std::vector<torch::Tensor>& x,
                std::vector<torch::Tensor>& y) {
  for (size_t i = 0; i < matrices.size(); ++i) {
    const Matrix& m = matrices[i];
    const torch::Tensor& input = x[i];
    if (input.size(0) == 1) {
      torch::Tensor row = y[i].view({m.out});
      torch::addmv_out(row, m.bias, m.weight, input[0]);
    } else {
      torch::addmm_out(y[i], m.bias, input, m.weight.t());
    }
  }
}

// The same products through the packed float32 product (packed_gemm.h), on
// this CPU's path.
void PackedToken(std::vector<Matrix>& matrices, const std::vector<torch::Tensor>& x,
                 std::vector<torch::Tensor>& y) {
  for (size_t i = 0; i < matrices.size(); ++i) {
    const Matrix& m = matrices[i];
    kernels::PackedGemm(x[i].data_ptr<float>(), x[i].size(0), m.in, m.packed.data(), m.out, m.in,
                        m.bias.data_ptr<float>(), y[i].data_ptr<float>(), m.out);
  }
}

void Int8Token(std::vector<Matrix>& matrices, const std::vector<torch::Tensor>& x,
               std::vector<torch::Tensor>& y) {
  for (size_t i = 0; i < matrices.size(); ++i) {
    const Matrix& m = matrices[i];
    kernels::Int8Gemm(x[i].data_ptr<float>(), x[i].size(0), m.in, m.panels, m.scale.data(), m.out,
                      m.in, m.bias.data_ptr<float>(), y[i].data_ptr<float>(), m.out);
  }
}

// Bytes per second a plain parallel read of `bytes` reaches (the median of
// `reps` passes over one buffer): what the weights' bytes are measured
// against. A buffer the size of a token's int8 or float32 weights stays in
// the caches between passes, as the weights do between decode steps; 256 MB
// does not. `huge_pages`: the buffer lies on transparent huge pages, as the
// packed weight copies do (model/kernels/huge_pages.h).
double ReadBandwidth(int64_t bytes, int reps, bool huge_pages = false) {
  std::vector<float, kernels::HugePageAllocator<float>> huge(huge_pages ? bytes / 4 : 0);
  torch::Tensor buffer = torch::rand({bytes / 4});
  if (huge_pages) {
    std::copy_n(buffer.data_ptr<float>(), bytes / 4, huge.data());
    buffer = torch::from_blob(huge.data(), {bytes / 4});
  }
  std::vector<double> times;
  for (int rep = 0; rep < reps + 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    const float sum = buffer.sum().item<float>();  // LibTorch's vectorised parallel reduction
    if (rep >= 5) times.push_back(Seconds(start));
    if (std::isnan(sum)) std::abort();
  }
  return bytes / Median(times);
}

// Weights per second one thread multiplies from a 480x160 matrix that stays
// in its L2 cache (307 KB as float32): the loops' own limit, with no memory
// in the way. For int8 that is the loop's own rate (rounding a row of
// activations, then vpdpbusd or vpmaddubsw), so no amount of bandwidth makes an
// int8 token faster than weights / (threads x this rate).
double CacheResidentRate(bool int8) {
  const Matrix m = RandomMatrix(480, 160);
  const int previous = at::get_num_threads();
  at::set_num_threads(1);
  const torch::Tensor x = torch::randn({m.in});
  torch::Tensor y = torch::empty({m.out});
  std::vector<double> times;
  for (int rep = 0; rep < 2000; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) {
      if (int8) {
        kernels::Int8Gemm(x.data_ptr<float>(), 1, m.in, m.panels, m.scale.data(), m.out, m.in,
                          m.bias.data_ptr<float>(), y.data_ptr<float>(), m.out);
      } else {
        torch::addmv_out(y, m.bias, m.weight, x);
      }
    }
    if (rep >= 100) times.push_back(Seconds(start) / 20);
  }
  at::set_num_threads(previous);
  return m.out * m.in / Median(times);
}

// Twelve independent chains of float32 multiply-adds on one register each,
// `steps` long: enough chains to cover the FMA units' latency on AVX-512 and
// AVX2 machines alike. Returns the floating-point operations done.
__attribute__((target("avx512f"))) double FmaChains512(int64_t steps) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(0.01f * i);
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t s = 0; s < steps; ++s) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  alignas(64) float lanes[16];
  float sink = 0;
  for (int i = 0; i < 12; ++i) {
    _mm512_store_ps(lanes, acc[i]);
    for (const float lane : lanes) sink += lane;
  }
  volatile float keep = sink;
  (void)keep;
  return 12.0 * 16 * 2 * static_cast<double>(steps);
}

__attribute__((target("avx2,fma"))) double FmaChains256(int64_t steps) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(0.01f * i);
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (int64_t s = 0; s < steps; ++s) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  alignas(32) float lanes[8];
  float sink = 0;
  for (int i = 0; i < 12; ++i) {
    _mm256_store_ps(lanes, acc[i]);
    for (const float lane : lanes) sink += lane;
  }
  volatile float keep = sink;
  (void)keep;
  return 12.0 * 8 * 2 * static_cast<double>(steps);
}

// This CPU's float32 multiply-add peak on `threads` threads, in FLOP/s
// (0 without AVX2 and FMA): the ceiling every product's rate is read
// against. The median of 5 runs of 50 million steps (75 ms each on a Zen 5,
// which issues two 16-float FMAs a cycle).
double FmaPeak(int threads) {
  const bool avx512 = kernels::CpuHasAvx512();
  if (!avx512 && !kernels::CpuHasAvx2()) return 0;
  constexpr int64_t kSteps = 50'000'000;
  std::vector<double> rates;
  for (int run = 0; run < 5; ++run) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> workers;
    std::vector<double> flop(threads);
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back(
          [&, t] { flop[t] = avx512 ? FmaChains512(kSteps) : FmaChains256(kSteps); });
    }
    for (auto& worker : workers) worker.join();
    double total = 0;
    for (const double f : flop) total += f;
    rates.push_back(total / Seconds(start));
  }
  return Median(rates);
}

// Floating-point operations per second of LibTorch's float32 matrix product
// on 512x512 matrices with every thread: the best the float path reaches
// here, what many-row products are measured against.
double GemmRate(int reps) {
  const torch::Tensor a = torch::randn({512, 512}), b = torch::randn({512, 512});
  torch::Tensor c = torch::empty({512, 512});
  std::vector<double> times;
  for (int rep = 0; rep < reps + 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    torch::mm_out(c, a, b);
    if (rep >= 5) times.push_back(Seconds(start));
  }
  return 2.0 * 512 * 512 * 512 / Median(times);
}

// Runs each of `variants` in turn, `reps` times after 3 to warm up, and
// prints the medians and the rate of `flop` floating-point operations.
struct Variant {
  std::string name;
  std::function<void()> run;
};
void TimeAlternating(const std::string& label, double flop, int reps,
                     const std::vector<Variant>& variants) {
  std::vector<std::vector<double>> times(variants.size());
  for (int rep = 0; rep < reps + 3; ++rep) {
    for (size_t i = 0; i < variants.size(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      variants[i].run();
      if (rep >= 3) times[i].push_back(Seconds(start));
    }
  }
  for (size_t i = 0; i < variants.size(); ++i) {
    const double median = Median(times[i]);
    std::printf("%s, %s: %9.3f ms %8.1f GFLOP/s\n", label.c_str(), variants[i].name.c_str(),
                median * 1e3, flop / median / 1e9);
  }
}

// The two register tilings of `prefill` (kernels.h, AttentionTiles), this
// CPU's marked.
template <typename Prefill>
std::vector<Variant> BothTilings(Prefill prefill) {
  std::vector<Variant> variants;
  for (const auto tiles : {kernels::AttentionTiles::kWide, kernels::AttentionTiles::kNarrow}) {
    const std::string name = tiles == kernels::AttentionTiles::kWide ? "AVX-512" : "AVX2";
    const bool own = tiles == kernels::AttentionTilesForCpu();
    variants.push_back({name + " tiles" + (own ? " (this CPU's)" : ""), [=] { prefill(tiles); }});
  }
  return variants;
}

template <typename Prefill>
void TimeBothTilings(const std::string& label, double flop, int reps, Prefill prefill) {
  TimeAlternating(label, flop, reps, BothTilings(prefill));
}

// Median seconds of CausalAttentionPrefill for `chunk` new tokens over
// `cached` ones, one row, LFM2-350M's heads, with each tiling in turn;
// prints them with their rates.
void TimePrefillAttention(int64_t chunk, int64_t cached, int reps) {
  constexpr int64_t kHeads = 16, kKvHeads = 8, kHeadDim = 64;
  const int64_t keys = cached + chunk;
  const torch::Tensor k = torch::randn({kKvHeads, keys, kHeadDim});
  const torch::Tensor v = torch::randn({kKvHeads, keys, kHeadDim});
  const torch::Tensor q = torch::randn({chunk, kHeads, kHeadDim});
  torch::Tensor out = torch::empty({chunk, kHeads, kHeadDim});
  const int64_t slot = 0;
  kernels::CausalPrefillArgs a;
  a.batch = 1;
  a.heads = kHeads;
  a.kv_heads = kKvHeads;
  a.head_dim = kHeadDim;
  a.capacity = keys;
  a.slots = &slot;
  a.k_cache = k.data_ptr<float>();
  a.v_cache = v.data_ptr<float>();
  a.scale = 0.125f;
  a.out = out.data_ptr<float>();
  a.time = chunk;
  a.start = cached;
  a.q = q.data_ptr<float>();
  a.row_stride = chunk * kHeads * kHeadDim;
  a.token_stride = kHeads * kHeadDim;
  // Query t attends to cached + t + 1 keys: scores and weighted sums.
  const double flop = 4.0 * kHeads * kHeadDim * chunk * (cached + (chunk + 1) / 2.0);
  TimeBothTilings(
      std::to_string(chunk) + " new over " + std::to_string(cached) + " cached", flop, reps,
      [&](kernels::AttentionTiles tiles) { kernels::CausalAttentionPrefill(a, tiles); });
}

// Median seconds of the cached attention step of LFM2-350M's six attention
// layers for `rows` rows over `context` keys, the keys and values appended
// first or by the step; prints them with their rates.
void TimeAttentionStep(int64_t rows, int64_t context, int reps) {
  constexpr int64_t kLayers = 6, kHeads = 16, kKvHeads = 8, kHeadDim = 64;
  const int64_t capacity = context + 1, width = (kHeads + 2 * kKvHeads) * kHeadDim;
  std::vector<torch::Tensor> k, v;
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    k.push_back(torch::randn({rows, kKvHeads, capacity, kHeadDim}));
    v.push_back(torch::randn({rows, kKvHeads, capacity, kHeadDim}));
  }
  const torch::Tensor qkv = torch::randn({rows, width});
  const float* new_k = qkv.data_ptr<float>() + kHeads * kHeadDim;
  const float* new_v = new_k + kKvHeads * kHeadDim;
  const std::vector<int64_t> lengths(rows, context);  // every rep writes position `context`
  torch::Tensor out = torch::empty({rows, kHeads * kHeadDim});
  auto step = [&](int64_t layer, bool fused) {
    float* k_cache = k[layer].data_ptr<float>();
    float* v_cache = v[layer].data_ptr<float>();
    kernels::CachedAttentionArgs a;
    a.batch = rows;
    a.heads = kHeads;
    a.kv_heads = kKvHeads;
    a.head_dim = kHeadDim;
    a.capacity = capacity;
    a.k_cache = k_cache;
    a.v_cache = v_cache;
    a.scale = 0.125f;
    a.out = out.data_ptr<float>();
    a.lengths = lengths.data();
    a.q = qkv.data_ptr<float>();
    a.q_stride = width;
    if (fused) {
      a.append = {new_k, new_v, width};
    } else {
      kernels::AppendToCache(rows, kKvHeads, kHeadDim, capacity, nullptr, lengths.data(), new_k,
                             new_v, width, k_cache, v_cache);
    }
    kernels::CachedAttentionStep(a);
  };
  auto layers = [&](bool fused) {
    return [&step, fused] {
      for (int64_t layer = 0; layer < kLayers; ++layer) step(layer, fused);
    };
  };
  const double flop = 4.0 * kLayers * rows * kHeads * kHeadDim * capacity;
  TimeAlternating(std::to_string(rows) + " rows over " + std::to_string(context), flop, reps,
                  {{"appended first", layers(false)}, {"appended by the step", layers(true)}});
}

// SwiGLU's gating of `rows` rows 4,608 wide, op by op and fused.
void TimeSwiGlu(int64_t rows, int reps) {
  const torch::Tensor gate = torch::randn({rows, 4608}), up = torch::randn({rows, 4608});
  torch::Tensor work = gate.clone(), sink;
  TimeAlternating(std::to_string(rows) + " rows", 4.0 * gate.numel(), reps,
                  {{"LibTorch silu and product", [&] { sink = torch::silu(gate) * up; }},
                   {"SiluMulInPlace", [&] {
                      work.copy_(gate);
                      kernels::SiluMulInPlace(work.numel(), work.data_ptr<float>(),
                                              up.data_ptr<float>());
                    }}});
}

// LinearAttentionPrefill over `tokens` tokens of one row, the bundled linear
// models' heads, from a zero state (the state's scale does not change the
// work).
void TimeLinearPrefill(int64_t tokens, int reps) {
  constexpr int64_t kHeads = 4, kHeadDim = 40, kBlock = 64;
  const torch::Tensor qkv = torch::randn({tokens, 3 * kHeads * kHeadDim});
  const torch::Tensor decay = torch::full({kHeads}, 0.99f);
  torch::Tensor s = torch::zeros({kHeads, kHeadDim, kHeadDim}),
                z = torch::zeros({kHeads, kHeadDim});
  torch::Tensor out = torch::empty({tokens, kHeads, kHeadDim});
  const int64_t slot = 0;
  kernels::LinearPrefillArgs a;
  a.batch = 1;
  a.heads = kHeads;
  a.head_dim = kHeadDim;
  a.slots = &slot;
  a.q = qkv.data_ptr<float>();
  a.k = a.q + kHeads * kHeadDim;
  a.v = a.k + kHeads * kHeadDim;
  a.decay = decay.data_ptr<float>();
  a.s = s.data_ptr<float>();
  a.z = z.data_ptr<float>();
  a.time = tokens;
  a.block = kBlock;
  a.token_stride = 3 * kHeads * kHeadDim;
  a.row_stride = tokens * a.token_stride;
  a.out = out.data_ptr<float>();
  // Per token and head: scores and their weighted values over half a block
  // on average, the state's product and its update.
  const double flop = 2.0 * kHeads * tokens * kHeadDim * (kBlock + 2 * kHeadDim);
  TimeBothTilings("linear prefill of " + std::to_string(tokens) + " tokens", flop, reps,
                  [&](kernels::AttentionTiles tiles) {
                    s.zero_();
                    z.zero_();
                    kernels::LinearAttentionPrefill(a, tiles);
                  });
}

// Mamba2Scan over `tokens` tokens of one row, `heads` heads of `head_dim`
// with a state of 128 and one group, from a zero state: token by token and
// chunked with each tiling. The rate counts the recurrence's 4 P N
// operations per token and head for every form.
void TimeMamba2Shape(const std::string& shape, int64_t heads, int64_t head_dim, int64_t tokens,
                     int reps) {
  constexpr int64_t kState = 128;
  const torch::Tensor xbc = torch::randn({tokens, heads * head_dim + 2 * kState});
  const torch::Tensor dt = torch::randn({tokens, heads}) - 2.0f;
  const torch::Tensor a_log = torch::zeros({heads}), d = torch::ones({heads});
  torch::Tensor s = torch::zeros({heads, head_dim, kState});
  torch::Tensor out = torch::empty({tokens, heads * head_dim});
  kernels::Mamba2ScanArgs a;
  a.batch = 1;
  a.time = tokens;
  a.heads = heads;
  a.head_dim = head_dim;
  a.state_size = kState;
  a.x = xbc.data_ptr<float>();
  a.b = a.x + heads * head_dim;
  a.c = a.b + kState;
  a.xbc_stride = xbc.size(1);
  a.dt = dt.data_ptr<float>();
  a.a_log = a_log.data_ptr<float>();
  a.d = d.data_ptr<float>();
  a.s = s.data_ptr<float>();
  a.out = out.data_ptr<float>();
  const double flop = 4.0 * tokens * heads * head_dim * kState;
  std::vector<Variant> variants = BothTilings([&](kernels::AttentionTiles tiles) {
    kernels::Mamba2ScanArgs chunked = a;
    chunked.block = 64;
    kernels::Mamba2Scan(chunked, tiles);
  });
  for (Variant& v : variants) v.name = "chunked, " + v.name;
  variants.insert(variants.begin(), {"token by token", [&] {
                                       kernels::Mamba2ScanArgs recurrence = a;
                                       recurrence.block = 0;
                                       kernels::Mamba2Scan(recurrence);
                                     }});
  TimeAlternating(shape + " scan of " + std::to_string(tokens) + " tokens", flop, reps, variants);
}

// The scan at mamba2-130m's heads (24 of 64) and Granite 4.0-H 350M's (48
// of 32).
void TimeMamba2Scan(int64_t tokens, int reps) {
  TimeMamba2Shape("mamba2-130m", 24, 64, tokens, reps);
  TimeMamba2Shape("granite-4.0-h-350m", 48, 32, tokens, reps);
}

// Runs time(tokens, reps) for each count of a --linear or --mamba2 list,
// under `title`; returns the exit status: 2 after printing why if one is not
// a positive count.
int TimeLengths(const std::string& flag, const std::string& list, const char* title, int reps,
                int threads, void (*time)(int64_t, int)) {
  std::vector<int64_t> counts;
  for (const absl::string_view length : absl::StrSplit(list, ',')) {
    int64_t tokens = 0;
    if (!absl::SimpleAtoi(length, &tokens) || tokens < 1) {
      std::fprintf(stderr, "--%s: '%s' is not a token count (e.g. 512)\n", flag.c_str(),
                   std::string(length).c_str());
      return 2;
    }
    counts.push_back(tokens);
  }
  std::printf("%s, threads %d, median of %d\n", title, threads, reps);
  for (const int64_t tokens : counts) time(tokens, reps);
  return 0;
}

// Calls time(A, B) for each "AxB" of `shapes` (A >= 1, B >= 0); 0, or 2
// with a message naming --flag when one is not of that form.
template <typename Time>
int ForEachShape(const char* flag, const char* form, const std::string& shapes, Time&& time) {
  for (const absl::string_view shape : absl::StrSplit(shapes, ',')) {
    const std::vector<std::string> parts = absl::StrSplit(shape, 'x');
    int64_t a = 0, b = -1;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &a) || !absl::SimpleAtoi(parts[1], &b) ||
        a < 1 || b < 0) {
      std::fprintf(stderr, "--%s: '%s' is not %s\n", flag, std::string(shape).c_str(), form);
      return 2;
    }
    time(a, b);
  }
  return 0;
}

}  // namespace
}  // namespace attn

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int reps = absl::GetFlag(FLAGS_reps);
  const int threads = attn::ConfigureThreads(absl::GetFlag(FLAGS_threads));
  torch::NoGradGuard no_grad;
  if (const std::string shapes = absl::GetFlag(FLAGS_attention); !shapes.empty()) {
    std::printf("causal prefill attention, threads %d, median of %d\n", threads, reps);
    return attn::ForEachShape(
        "attention", "CHUNKxCACHED (e.g. 121x2800)", shapes,
        [&](int64_t chunk, int64_t cached) { attn::TimePrefillAttention(chunk, cached, reps); });
  }
  if (const std::string shapes = absl::GetFlag(FLAGS_attention_step); !shapes.empty()) {
    std::printf("decode step attention, 6 layers, threads %d, median of %d\n", threads, reps);
    return attn::ForEachShape(
        "attention_step", "ROWSxCONTEXT (e.g. 51x250)", shapes,
        [&](int64_t rows, int64_t context) { attn::TimeAttentionStep(rows, context, reps); });
  }
  if (const std::string lengths = absl::GetFlag(FLAGS_linear); !lengths.empty()) {
    return attn::TimeLengths("linear", lengths, "linear attention prefill", reps, threads,
                             attn::TimeLinearPrefill);
  }
  if (const std::string rows = absl::GetFlag(FLAGS_swiglu); !rows.empty()) {
    return attn::TimeLengths("swiglu", rows, "SwiGLU gating", reps, threads, attn::TimeSwiGlu);
  }
  if (const std::string lengths = absl::GetFlag(FLAGS_mamba2); !lengths.empty()) {
    return attn::TimeLengths("mamba2", lengths, "Mamba-2 scan", reps, threads,
                             attn::TimeMamba2Scan);
  }
  auto matrices = attn::ModelMatrices();
  int64_t weights = 0;
  for (const auto& m : matrices) weights += m.out * m.in;
  const double float_mb = weights * 4 / 1e6, int8_mb = weights / 1e6;
  std::printf(
      "threads %d, %d alternating repetitions per row count; %.2f MB float32, %.2f MB "
      "int8 (+ scales) per token; int8 loops: %s; packed float32: %s\n",
      threads, reps, float_mb, int8_mb, attn::kernels::Int8PathName(attn::kernels::Int8GemmPath()),
      attn::kernels::PackedPathName(attn::kernels::PackedGemmPath()));
  const double read_int8 = attn::ReadBandwidth(weights, 400);
  const double read_float = attn::ReadBandwidth(4 * weights, 400);
  std::printf(
      "plain parallel read: %.1f GB/s over %.1f MB, %.1f GB/s over %.1f MB, %.1f GB/s over "
      "256 MB (%.1f GB/s on huge pages)\n",
      read_int8 / 1e9, int8_mb, read_float / 1e9, float_mb,
      attn::ReadBandwidth(int64_t{256} << 20, 10) / 1e9,
      attn::ReadBandwidth(int64_t{256} << 20, 10, true) / 1e9);
  const double int8_rate = attn::CacheResidentRate(true);
  const double float_rate = attn::CacheResidentRate(false);
  // An int8 token takes at least the longer of multiplying its weights on
  // every thread and reading their bytes; a float32 token at least reading
  // its bytes.
  const double compute_bound = weights / (threads * int8_rate),
               int8_read_bound = weights / read_int8;
  const double int8_bound = std::max(compute_bound, int8_read_bound);
  const double float_bound = 4 * weights / read_float;
  std::printf(
      "one thread on a cache-resident 480x160 matrix: int8 %.1f, float32 %.1f G weights/s\n"
      "one-row limits: int8 token >= %.1f us (multiplying on %d threads: %.1f us, reading "
      "%.1f MB: %.1f us), float32 token >= %.1f us (reading %.1f MB): int8 at most %.2fx "
      "faster\n",
      int8_rate / 1e9, float_rate / 1e9, int8_bound * 1e6, threads, compute_bound * 1e6, int8_mb,
      int8_read_bound * 1e6, float_bound * 1e6, float_mb, float_bound / int8_bound);
  std::printf("float32 multiply-add peak: %.1f GFLOP/s; 512x512 matrix product: %.1f GFLOP/s\n",
              attn::FmaPeak(threads) / 1e9, attn::GemmRate(100) / 1e9);
  std::printf("%6s %14s %14s %14s %8s %8s %12s %12s %12s\n", "rows", "float32 (us)", "packed (us)",
              "int8 (us)", "f32/pk", "f32/int8", "pk GB/s", "int8 GB/s", "pk GFLOP/s");
  for (const absl::string_view count : absl::StrSplit(absl::GetFlag(FLAGS_rows), ',')) {
    int64_t rows = 0;
    if (!absl::SimpleAtoi(count, &rows) || rows < 1) {
      std::fprintf(stderr, "--rows: '%s' is not a positive row count\n",
                   std::string(count).c_str());
      return 2;
    }
    std::vector<torch::Tensor> x, y_float, y_packed, y_int8;
    for (const auto& m : matrices) {
      x.push_back(torch::randn({rows, m.in}));
      y_float.push_back(torch::empty({rows, m.out}));
      y_packed.push_back(torch::empty({rows, m.out}));
      y_int8.push_back(torch::empty({rows, m.out}));
    }
    std::vector<double> float_times, packed_times, int8_times;
    for (int rep = 0; rep < reps + 20; ++rep) {  // the first 20 warm up
      auto start = std::chrono::steady_clock::now();
      attn::FloatToken(matrices, x, y_float);
      const double f = attn::Seconds(start);
      start = std::chrono::steady_clock::now();
      attn::PackedToken(matrices, x, y_packed);
      const double p = attn::Seconds(start);
      start = std::chrono::steady_clock::now();
      attn::Int8Token(matrices, x, y_int8);
      const double q = attn::Seconds(start);
      if (rep >= 20) {
        float_times.push_back(f);
        packed_times.push_back(p);
        int8_times.push_back(q);
      }
    }
    const double f = attn::Median(float_times), p = attn::Median(packed_times),
                 q = attn::Median(int8_times);
    std::printf("%6ld %14.1f %14.1f %14.1f %8.2f %8.2f %12.1f %12.1f %12.1f\n",
                static_cast<long>(rows), f * 1e6, p * 1e6, q * 1e6, f / p, f / q,
                weights * 4 / p / 1e9, weights / q / 1e9, 2.0 * weights * rows / p / 1e9);
  }
  return 0;
}
