#include "model/kernels/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

namespace attn::kernels {
namespace {

constexpr size_t kPageBytes = 4096;

size_t RoundUp(size_t bytes, size_t unit) { return (bytes + unit - 1) / unit * unit; }

}  // namespace

void* AllocateHugePageBytes(size_t bytes) {
  if (bytes < kHugePageBytes) {
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  // A fresh mapping, not malloc's: memory malloc hands back may already be
  // mapped with 4 KiB pages (freed tensors of the load), which the advice
  // does not change. Map one huge page more than needed and trim to a run
  // that starts on a huge-page boundary, since the kernel backs only aligned
  // 2 MiB runs with huge pages.
  const size_t length = RoundUp(bytes, kPageBytes);
  void* mapped = mmap(nullptr, length + kHugePageBytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  const auto begin = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t aligned = RoundUp(begin, kHugePageBytes);
  const uintptr_t end = begin + length + kHugePageBytes;
  if (aligned > begin) munmap(mapped, aligned - begin);
  if (end > aligned + length)
    munmap(reinterpret_cast<void*>(aligned + length), end - aligned - length);
  void* p = reinterpret_cast<void*>(aligned);
  // Only whole huge pages: a tail advised too would take a whole 2 MiB page
  // for its last bytes. Advice only: EINVAL where the kernel has no THP.
  (void)madvise(p, bytes / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
  return p;
}

void FreeHugePageBytes(void* p, size_t bytes) {
  if (bytes < kHugePageBytes) {
    std::free(p);
  } else {
    munmap(p, RoundUp(bytes, kPageBytes));
  }
}

}  // namespace attn::kernels
