#include "model/mixers/state_pool.h"

#include <sys/mman.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

namespace attn {

namespace {

int64_t PageSize() {
  static const int64_t page = sysconf(_SC_PAGESIZE);
  return page;
}

// The mapping's context: its length, for munmap.
struct Mapping {
  void* memory;
  int64_t bytes;
};

// LazyZeros' deleter; IsLazyZeros recognises a pool by it.
void Unmap(void* context) {
  auto* mapping = static_cast<Mapping*>(context);
  munmap(mapping->memory, mapping->bytes);
  delete mapping;
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
  return at::for_blob(memory, shape)
      .context(new Mapping{memory, bytes}, &Unmap)
      .options(torch::kFloat)
      .make_tensor();
}

bool IsLazyZeros(const torch::Tensor& tensor) {
  return tensor.defined() && tensor.has_storage() &&
         tensor.storage().data_ptr().get_deleter() == &Unmap;
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

bool ReleasePooledRows(MixerState& state, const torch::Tensor& slots) {
  if (state.tensors.empty() || !state.length.device().is_cpu()) return false;
  for (const torch::Tensor& t : state.tensors) {
    // A whole pool, not a view into one: a view's row 0 is not the pool's.
    if (!IsLazyZeros(t) || !t.is_contiguous() || t.storage_offset() != 0 ||
        t.nbytes() != t.storage().nbytes()) {
      return false;
    }
  }
  ReleaseRowPages(state, slots);
  state.length.index_fill_(0, slots.to(torch::kCPU, torch::kLong), 0);
  return true;
}

void ReleaseRowPages(MixerState& state, const torch::Tensor& slots) {
  if (!state.length.device().is_cpu() || slots.numel() == 0) return;
  const torch::Tensor rows = slots.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t* ids = rows.data_ptr<int64_t>();
  const int64_t page = PageSize();
  for (torch::Tensor& tensor : state.tensors) {
    TORCH_CHECK(tensor.is_contiguous() && tensor.scalar_type() == torch::kFloat,
                "ReleaseRowPages: not a contiguous float pool");
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

}  // namespace attn
