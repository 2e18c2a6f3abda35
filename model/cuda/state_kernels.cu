#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "model/cuda/experts_math.h"
#include "model/cuda/mamba2_math.h"
#include "model/cuda/rwkv7_math.h"
#include "model/cuda/state_kernels.h"
#include "model/cuda/step_math.h"

namespace attn::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ float WarpSum(float value) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  return value;
}

// The sum over the warp's lanes, in every lane.
__device__ float WarpAllSum(float value) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

// A block per (row, head) and a warp per channel p at a time, its lanes
// across the state's columns (step_math.h): a warp reads and writes a row
// of S in whole cache lines and sums S C with shuffles.
__global__ void Mamba2StepKernel(Mamba2StepArgs a) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int64_t p = warp; p < a.head_dim; p += kWarpsPerBlock) {
    const float sum = WarpSum(Mamba2LanePart(a, blockIdx.x, p, lane));
    if (lane == 0) Mamba2Output(a, blockIdx.x, p, sum);
  }
}

// A thread per (row and position, channel): the units (mamba2_math.h)
// across the grid's first dimension, the channels across its second.
__global__ void CausalConvSiluKernel(kernels::CausalConvArgs a) {
  const int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (i < a.channels) ConvChannel(a, blockIdx.x, i);
}

// A block per (row, group): the threads' squares summed by warp, the warps'
// through shared memory, then each thread writes the channels it summed.
__global__ void GatedRmsNormKernel(GatedRmsNormArgs a) {
  __shared__ float warp_sums[kWarpsPerBlock];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t row = blockIdx.x, size = a.d / a.groups;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * size, end = first + size;
  float squares = 0.f;
  for (int64_t i = first + threadIdx.x; i < end; i += blockDim.x) {
    const float g = GatedValue(a, row, i);
    squares += g * g;
  }
  squares = WarpSum(squares);
  if (lane == 0) warp_sums[warp] = squares;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < kWarpsPerBlock; ++w) total += warp_sums[w];
  for (int64_t i = first + threadIdx.x; i < end; i += blockDim.x) GatedNormWrite(a, row, i, total);
}

// The same layout, a warp per value channel i at a time; S kk is summed
// into every lane before S changes.
__global__ void Rwkv7StepKernel(Rwkv7StepArgs a) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int64_t i = warp; i < a.head_dim; i += kWarpsPerBlock) {
    const float removed = WarpAllSum(Rwkv7RemovedPart(a, blockIdx.x, i, lane));
    const float out = WarpSum(Rwkv7UpdatePart(a, blockIdx.x, i, lane, removed));
    if (lane == 0) a.o[blockIdx.x * a.head_dim + i] = out;
  }
}

// Rwkv7StepKernel's layout over every token of a prefill, S in place: each
// warp keeps to its rows of S from token to token, so no barrier is needed.
// A (row, head)'s rows of S are spread over gridDim.y blocks, a warp each:
// a prefill of one row would otherwise fill a block per head.
__global__ void Rwkv7ScanKernel(Rwkv7ScanArgs a) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * kWarpsPerBlock + warp;
  const int64_t stride = static_cast<int64_t>(gridDim.y) * kWarpsPerBlock;
  for (int64_t t = 0; t < a.time; ++t) {
    const Rwkv7StepArgs step = Rwkv7TokenArgs(a, t);
    for (int64_t i = first; i < a.head_dim; i += stride) {
      const float removed = WarpAllSum(Rwkv7RemovedPart(step, blockIdx.x, i, lane));
      const float out = WarpSum(Rwkv7UpdatePart(step, blockIdx.x, i, lane, removed));
      if (lane == 0 && step.r != nullptr) a.o[Rwkv7ScanOutputAt(a, blockIdx.x, t, i)] = out;
    }
  }
}

// A thread per (token, channel): tokens across the grid's first dimension
// (a prefill's may pass the second's 65,535), channels across its second.
__global__ void Rwkv7MixKernel(kernels::TokenShiftMixArgs a, Rwkv7Mixes mu) {
  const int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (i < a.channels) MixChannel(a, mu, blockIdx.x, i);
}

// A block per token, a warp per head at a time: the head's squared norm is
// the warp's sum, and each lane normalises the channels it wrote.
__global__ void Rwkv7ActivationsKernel(kernels::Rwkv7ActivationsArgs a) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t c = a.heads * a.head_dim;
  for (int64_t h = warp; h < a.heads; h += kWarpsPerBlock) {
    const int64_t head0 = static_cast<int64_t>(blockIdx.x) * c + h * a.head_dim;
    float squares = 0.f;
    for (int64_t j = lane; j < a.head_dim; j += kWarp) squares += ActivateChannel(a, head0 + j);
    squares = WarpAllSum(squares);
    for (int64_t j = lane; j < a.head_dim; j += kWarp) NormalizeKey(a, head0 + j, squares);
  }
}

// A warp per (output token, head); a whole warp returns past the last.
__global__ void Rwkv7HeadOutputKernel(Rwkv7HeadOutputArgs a) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (unit >= a.batch * a.tail * a.heads) return;
  const HeadSums part = HeadOutputSums(a, unit, lane);
  const float mean = WarpAllSum(part.o) / static_cast<float>(a.head_dim);
  const float bonus = WarpAllSum(part.bonus);
  const float squares = WarpAllSum(HeadOutputSquares(a, unit, lane, mean));
  HeadOutputWrite(a, unit, lane, mean, squares, bonus);
}

// A block per (row, head), a thread per channel (step_math.h).
__global__ void LinearStepKernel(LinearStepArgs a) {
  extern __shared__ float shared[];  // phi(q), phi(k), phi(q) * z: 3 N floats
  const int64_t channel = threadIdx.x;
  if (channel < a.head_dim) LinearKeyChannel(a, blockIdx.x, channel, shared);
  __syncthreads();
  if (channel < a.head_dim) LinearValueColumn(a, blockIdx.x, channel, shared);
}

// A block per (row, kv head), a thread per channel: the new key and value
// go into the cache before any block attends to them.
__global__ void AttentionAppendKernel(AttentionStepArgs a) {
  for (int64_t e = threadIdx.x; e < a.head_dim; e += blockDim.x) {
    AttentionAppend(a, blockIdx.x / a.kv_heads, blockIdx.x % a.kv_heads, e);
  }
}

// A block per (row, head) and split, its warps taking every
// kAttentionWarps-th position of the split's span, each warp's lanes across
// the channels: a warp reads a key and a value in whole cache lines, sums
// the dot product with shuffles and keeps its own online softmax; the
// warps' runs are merged at the end, into the output or, split, into the
// split's partial run. The length is read on the device, so a CUDA graph
// can capture the step.
constexpr int kAttentionWarps = 4;
__global__ void AttentionStepKernel(AttentionStepArgs a) {
  __shared__ float maxes[kAttentionWarps], sums[kAttentionWarps];
  __shared__ float values[kAttentionWarps * kMaxAttentionHeadDim];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t block = blockIdx.x, split = blockIdx.y;
  const int64_t t = AttentionLength(a, block);
  if (t < 0) {  // every thread of the block sees the same row
    for (int64_t e = threadIdx.x; e < a.head_dim && a.splits == 1; e += blockDim.x) {
      a.out[block * a.head_dim + e] = 0.f;
    }
    return;
  }
  int64_t begin = 0, end = 0;
  AttentionSpan(a, t, split, &begin, &end);
  SoftmaxRun run;
  for (int64_t j = begin + warp; j < end; j += kAttentionWarps) {
    const float dot = WarpAllSum(AttentionDotPart(a, block, t, j, lane));
    AttentionTake(a, block, j, lane, AttentionScore(a, block, t, j, dot), &run);
  }
  if (lane == 0) {
    maxes[warp] = run.max;
    sums[warp] = run.sum;
  }
  for (int i = 0; i < kAttentionLaneChannels; ++i) {
    const int64_t e = lane + static_cast<int64_t>(i) * kWarp;
    if (e < a.head_dim) values[warp * a.head_dim + e] = run.values[i];
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < a.head_dim; e += blockDim.x) {
    AttentionSplitResult(a, block, split, e, maxes, sums, values, kAttentionWarps);
  }
}

// A block per (row, head), a thread per channel: the splits' partial runs
// merged into the output.
__global__ void AttentionMergeKernel(AttentionStepArgs a) {
  const int64_t block = blockIdx.x;
  const bool held = AttentionLength(a, block) >= 0;
  for (int64_t e = threadIdx.x; e < a.head_dim; e += blockDim.x) {
    if (held) {
      AttentionMergeSplits(a, block, e);
    } else {
      a.out[block * a.head_dim + e] = 0.f;
    }
  }
}

// A thread per (row, channel): blocks of kChannelThreads channels, a grid
// row per batch row.
constexpr int kChannelThreads = 128;

__global__ void AftDecayStepKernel(AftDecayStepArgs a) {
  const int64_t d = static_cast<int64_t>(blockIdx.x) * kChannelThreads + threadIdx.x;
  if (d < a.channels) AftDecayChannel(a, blockIdx.y, d);
}

__global__ void Rwkv4WkvKernel(Rwkv4WkvArgs a) {
  const int64_t d = static_cast<int64_t>(blockIdx.x) * kChannelThreads + threadIdx.x;
  if (d < a.channels) Rwkv4Channel(a, blockIdx.y, d);
}

__global__ void AftStepKernel(AftStepArgs a) {
  const int64_t d = static_cast<int64_t>(blockIdx.x) * kChannelThreads + threadIdx.x;
  if (d < a.channels) AftChannel(a, blockIdx.y, d);
}

// Lists the choices of the block's expert (blockIdx.x) in `choices`, in
// any order; every thread returns how many.
__device__ int ListExpertChoices(const ExpertsArgs& a, int64_t* choices, int* count) {
  if (threadIdx.x == 0) *count = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < a.rows * a.top_k; i += blockDim.x) {
    if (a.chosen[i] == blockIdx.x) choices[atomicAdd(count, 1)] = i;
  }
  __syncthreads();
  return *count;
}

// One stage of an expert's SwiGLU for every choice of it (experts_math.h):
// a warp per row of the expert's matrices at a time, kExpertChoicesAtOnce
// choices a pass. The hidden stage (kHidden) writes act = silu(W_gate x)
// * (W_up x), the output stage out = W_down act.
template <bool kHidden>
__global__ void ExpertsKernel(ExpertsArgs a) {
  __shared__ int64_t choices[kMaxExpertChoices];
  __shared__ int count;
  const int n = ListExpertChoices(a, choices, &count);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t rows = kHidden ? a.hidden : a.d, width = kHidden ? a.d : a.hidden;
  const int64_t stride = static_cast<int64_t>(gridDim.y) * kWarpsPerBlock;
  for (int64_t row = static_cast<int64_t>(blockIdx.y) * kWarpsPerBlock + warp; row < rows;
       row += stride) {
    for (int first = 0; first < n; first += kExpertChoicesAtOnce) {
      const int batch = min(n - first, kExpertChoicesAtOnce);
      int64_t inputs[kExpertChoicesAtOnce];
      ExpertInputs(a, choices, first, batch, kHidden, inputs);
      float sums[kExpertChoicesAtOnce], ups[kExpertChoicesAtOnce];
      const void* w = kHidden ? a.gate[blockIdx.x] : a.down[blockIdx.x];
      ExpertLaneDots(w, a.bf16, row, width, kHidden ? a.x : a.act, inputs, batch, lane, sums);
      if (kHidden)
        ExpertLaneDots(a.up[blockIdx.x], a.bf16, row, width, a.x, inputs, batch, lane, ups);
#pragma unroll
      for (int c = 0; c < kExpertChoicesAtOnce; ++c) {
        if (c >= batch) break;
        const float sum = WarpSum(sums[c]);
        const float up = kHidden ? WarpSum(ups[c]) : 0.f;
        if (lane != 0) continue;
        if (kHidden) {
          a.act[choices[first + c] * a.hidden + row] = ExpertActivation(sum, up);
        } else {
          a.out[choices[first + c] * a.d + row] = sum;
        }
      }
    }
  }
}

}  // namespace

bool KernelsEnabled() {
  static const bool enabled = [] {
    const char* setting = std::getenv("ATTN_CUDA_KERNELS");
    return setting == nullptr || std::strcmp(setting, "0") != 0;
  }();
  return enabled;
}

namespace {

// A thread per (row, channel): the channels across blocks, the rows
// across the grid's second dimension.
dim3 ChannelGrid(int64_t batch, int64_t channels) {
  return dim3(static_cast<unsigned>((channels + kChannelThreads - 1) / kChannelThreads),
              static_cast<unsigned>(batch));
}

cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

std::string LaunchError() {
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? "" : cudaGetErrorString(error);
}

}  // namespace

std::string Mamba2Step(const Mamba2StepArgs& args, void* stream) {
  if (args.batch == 0) return "";
  Mamba2StepKernel<<<static_cast<unsigned>(args.batch * args.heads), kWarp * kWarpsPerBlock, 0,
                     AsStream(stream)>>>(args);
  return LaunchError();
}

std::string CausalConvSilu(const kernels::CausalConvArgs& args, void* stream) {
  const int64_t units = args.batch * (args.time + args.width - 1);
  if (units == 0 || args.channels == 0) return "";
  const dim3 grid(static_cast<unsigned>(units),
                  static_cast<unsigned>((args.channels + kChannelThreads - 1) / kChannelThreads));
  CausalConvSiluKernel<<<grid, kChannelThreads, 0, AsStream(stream)>>>(args);
  return LaunchError();
}

std::string GatedRmsNorm(const GatedRmsNormArgs& args, void* stream) {
  if (args.rows == 0) return "";
  if (args.groups < 1 || args.d % args.groups != 0) return "groups that do not divide the width";
  const dim3 grid(static_cast<unsigned>(args.rows), static_cast<unsigned>(args.groups));
  GatedRmsNormKernel<<<grid, kWarp * kWarpsPerBlock, 0, AsStream(stream)>>>(args);
  return LaunchError();
}

std::string Rwkv7Step(const Rwkv7StepArgs& args, void* stream) {
  if (args.batch == 0) return "";
  Rwkv7StepKernel<<<static_cast<unsigned>(args.batch * args.heads), kWarp * kWarpsPerBlock, 0,
                    AsStream(stream)>>>(args);
  return LaunchError();
}

std::string Rwkv7Scan(const Rwkv7ScanArgs& args, void* stream) {
  if (args.batch == 0 || args.time == 0) return "";
  const dim3 grid(static_cast<unsigned>(args.batch * args.heads),
                  static_cast<unsigned>((args.head_dim + kWarpsPerBlock - 1) / kWarpsPerBlock));
  Rwkv7ScanKernel<<<grid, kWarp * kWarpsPerBlock, 0, AsStream(stream)>>>(args);
  return LaunchError();
}

std::string Rwkv7Mix(const kernels::TokenShiftMixArgs& args, void* stream) {
  const int64_t tokens = args.batch * args.time;
  if (tokens == 0 || args.count == 0) return "";
  if (args.count > kMaxRwkv7Mixes) return "over " + std::to_string(kMaxRwkv7Mixes) + " mixes";
  Rwkv7Mixes mu;
  for (int64_t m = 0; m < args.count; ++m) mu.mixes[m] = args.mixes[m];
  const dim3 grid(static_cast<unsigned>(tokens),
                  static_cast<unsigned>((args.channels + kChannelThreads - 1) / kChannelThreads));
  Rwkv7MixKernel<<<grid, kChannelThreads, 0, AsStream(stream)>>>(args, mu);
  return LaunchError();
}

std::string Rwkv7Activations(const kernels::Rwkv7ActivationsArgs& args, void* stream) {
  if (args.tokens == 0) return "";
  Rwkv7ActivationsKernel<<<static_cast<unsigned>(args.tokens), kWarp * kWarpsPerBlock, 0,
                           AsStream(stream)>>>(args);
  return LaunchError();
}

std::string Rwkv7HeadOutput(const Rwkv7HeadOutputArgs& args, void* stream) {
  const int64_t units = args.batch * args.tail * args.heads;
  if (units == 0) return "";
  Rwkv7HeadOutputKernel<<<static_cast<unsigned>((units + kWarpsPerBlock - 1) / kWarpsPerBlock),
                          kWarp * kWarpsPerBlock, 0, AsStream(stream)>>>(args);
  return LaunchError();
}

std::string LinearStep(const LinearStepArgs& args, void* stream) {
  if (args.batch == 0) return "";
  if (args.head_dim > kMaxLinearHeadDim) {
    return "linear attention heads over " + std::to_string(kMaxLinearHeadDim) + " channels";
  }
  const int64_t threads = (args.head_dim + kWarp - 1) / kWarp * kWarp;
  const size_t shared = 3 * static_cast<size_t>(args.head_dim) * sizeof(float);
  LinearStepKernel<<<static_cast<unsigned>(args.batch * args.heads), static_cast<unsigned>(threads),
                     shared, AsStream(stream)>>>(args);
  return LaunchError();
}

std::string AftDecayStep(const AftDecayStepArgs& args, void* stream) {
  if (args.batch == 0) return "";
  AftDecayStepKernel<<<ChannelGrid(args.batch, args.channels), kChannelThreads, 0,
                       AsStream(stream)>>>(args);
  return LaunchError();
}

std::string Rwkv4Wkv(const Rwkv4WkvArgs& args, void* stream) {
  if (args.batch == 0 || args.time == 0) return "";
  Rwkv4WkvKernel<<<ChannelGrid(args.batch, args.channels), kChannelThreads, 0, AsStream(stream)>>>(
      args);
  return LaunchError();
}

std::string AttentionStep(const AttentionStepArgs& args, void* stream) {
  if (args.batch == 0) return "";
  if (args.head_dim > kMaxAttentionHeadDim) {
    return "attention heads over " + std::to_string(kMaxAttentionHeadDim) + " channels";
  }
  if (args.kv_heads <= 0 || args.heads % args.kv_heads != 0) {
    return "query heads not a multiple of key/value heads";
  }
  if (args.splits < 1 || (args.splits > 1 && args.partial == nullptr)) {
    return "a split attention step needs its partial results' memory";
  }
  const unsigned threads = kWarp * kAttentionWarps;
  const unsigned blocks = static_cast<unsigned>(args.batch * args.heads);
  AttentionAppendKernel<<<static_cast<unsigned>(args.batch * args.kv_heads), threads, 0,
                          AsStream(stream)>>>(args);
  AttentionStepKernel<<<dim3(blocks, static_cast<unsigned>(args.splits)), threads, 0,
                        AsStream(stream)>>>(args);
  if (args.splits > 1) {
    AttentionMergeKernel<<<blocks, threads, 0, AsStream(stream)>>>(args);
  }
  return LaunchError();
}

std::string AftStep(const AftStepArgs& args, void* stream) {
  if (args.batch == 0) return "";
  AftStepKernel<<<ChannelGrid(args.batch, args.channels), kChannelThreads, 0, AsStream(stream)>>>(
      args);
  return LaunchError();
}

std::string Experts(const ExpertsArgs& args, void* stream) {
  if (args.rows == 0) return "";
  if (args.rows * args.top_k > kMaxExpertChoices) {
    return "over " + std::to_string(kMaxExpertChoices) + " choices of experts in one call";
  }
  // A block per expert and slice of its matrices' rows, at most 256
  // slices: warps stride over the rows beyond.
  const auto slices = [](int64_t rows) {
    const int64_t wanted = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
    return static_cast<unsigned>(wanted < 256 ? wanted : 256);
  };
  const unsigned experts = static_cast<unsigned>(args.experts);
  ExpertsKernel<true>
      <<<dim3(experts, slices(args.hidden)), kWarp * kWarpsPerBlock, 0, AsStream(stream)>>>(args);
  ExpertsKernel<false>
      <<<dim3(experts, slices(args.d)), kWarp * kWarpsPerBlock, 0, AsStream(stream)>>>(args);
  return LaunchError();
}

}  // namespace attn::cuda
