#include "model/mixers/kv_cache.h"

#include <sys/mman.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "model/kernels/kernels.h"

namespace attn {

using torch::indexing::Slice;

namespace {

int64_t PageSize() {
  static const int64_t page = sysconf(_SC_PAGESIZE);
  return page;
}

// Whether every tensor of `empty` (one row) is float and all zeros.
bool IsZeroRow(const MixerState& empty) {
  if (empty.length.numel() != 1 || empty.length.item<int64_t>() != 0) return false;
  for (const torch::Tensor& t : empty.tensors) {
    if (t.scalar_type() != torch::kFloat || t.dim() == 0 || t.size(0) != 1 ||
        t.count_nonzero().item<int64_t>() != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace

torch::Tensor LazyZeros(const std::vector<int64_t>& shape) {
  int64_t bytes = static_cast<int64_t>(sizeof(float));
  for (int64_t size : shape) bytes *= size;
  if (bytes == 0) return torch::zeros(shape, torch::kFloat);
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  TORCH_CHECK(memory != MAP_FAILED, "cannot map ", bytes,
              " bytes for a state pool: ", std::strerror(errno),
              "; lower --max_active or the model's max_context");
  return torch::from_blob(
      memory, shape, [bytes](void* p) { munmap(p, bytes); }, torch::kFloat);
}

MixerState MakeStatePool(const SequenceMixer& mixer, int64_t rows, torch::Device device) {
  if (!device.is_cpu() || rows <= 1) return mixer.initial_state(rows, device);
  const MixerState empty = mixer.initial_state(1, device);
  if (!IsZeroRow(empty)) return mixer.initial_state(rows, device);
  MixerState pool;
  pool.length = torch::zeros({rows}, empty.length.options());
  for (const torch::Tensor& t : empty.tensors) {
    std::vector<int64_t> shape = t.sizes().vec();
    shape[0] = rows;
    pool.tensors.push_back(LazyZeros(shape));
  }
  return pool;
}

bool ReleaseZeroRows(const SequenceMixer& mixer, MixerState& state, const torch::Tensor& slots) {
  if (!state.length.device().is_cpu()) return false;
  for (const torch::Tensor& t : state.tensors) {
    if (!t.is_contiguous() || t.scalar_type() != torch::kFloat) return false;
  }
  if (!IsZeroRow(mixer.initial_state(1, state.length.device()))) return false;
  ReleaseKvCacheRows(state, slots);
  state.length.index_fill_(0, slots.to(torch::kCPU, torch::kLong), 0);
  return true;
}

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

void ReleaseKvCacheRows(MixerState& state, const torch::Tensor& slots) {
  if (!state.length.device().is_cpu() || slots.numel() == 0) return;
  const torch::Tensor rows = slots.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t* ids = rows.data_ptr<int64_t>();
  const int64_t page = PageSize();
  for (torch::Tensor& tensor : state.tensors) {
    TORCH_CHECK(tensor.is_contiguous() && tensor.scalar_type() == torch::kFloat,
                "ReleaseKvCacheRows: not a key/value cache");
    const int64_t row_bytes = tensor.numel() / tensor.size(0) * static_cast<int64_t>(sizeof(float));
    auto* base = static_cast<char*>(tensor.data_ptr());
    for (int64_t i = 0; i < rows.numel(); ++i) {
      TORCH_CHECK(ids[i] >= 0 && ids[i] < tensor.size(0), "slot ", ids[i], " outside the pool");
      char* begin = base + ids[i] * row_bytes;
      char* end = begin + row_bytes;
      // Whole pages go back to the system and read as zeros again; the
      // partial pages at the row's ends, shared with its neighbours, are
      // cleared instead.
      auto* first_page =
          reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page);
      auto* last_page = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(end) / page * page);
      if (first_page >= last_page) {
        std::memset(begin, 0, row_bytes);
        continue;
      }
      std::memset(begin, 0, first_page - begin);
      std::memset(last_page, 0, end - last_page);
      TORCH_CHECK(madvise(first_page, last_page - first_page, MADV_DONTNEED) == 0,
                  "madvise: ", std::strerror(errno));
    }
  }
}

int64_t ResidentBytes(const torch::Tensor& tensor) {
  const int64_t page = PageSize();
  const auto start = reinterpret_cast<uintptr_t>(tensor.data_ptr()) / page * page;
  const auto end = reinterpret_cast<uintptr_t>(tensor.data_ptr()) + tensor.nbytes();
  const int64_t pages = (end - start + page - 1) / page;
  std::vector<unsigned char> resident(pages);
  TORCH_CHECK(mincore(reinterpret_cast<void*>(start), end - start, resident.data()) == 0,
              "mincore: ", std::strerror(errno));
  int64_t count = 0;
  for (unsigned char r : resident) count += r & 1;
  return count * page;
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
  kernels::AppendToCache(batch, kv_heads, head_dim, args.capacity, slots, lengths, qkv_data + d,
                         qkv_data + d + kv, stride, state.tensors[0].data_ptr<float>(),
                         state.tensors[1].data_ptr<float>());
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

int64_t KvCacheBytes(int64_t context, int64_t capacity, int64_t d_model) {
  return 2 * std::min(context, capacity) * d_model * static_cast<int64_t>(sizeof(float)) +
         static_cast<int64_t>(sizeof(int64_t));
}

}  // namespace attn
