// Memory for the weight copies a decode step streams from DRAM, placed on
// transparent huge pages.
//
// Why: at one row a step reads every weight once, so it runs at the rate the
// memory system delivers bytes. With 4 KiB pages the RWKV-7 0.4B model's
// 1.8 GB of packed weights span 440,000 pages, about a hundred times what
// the TLB holds, and every 4 KiB of a stream costs a page walk. Linux's default
// transparent-huge-page mode ("madvise", Debian's) maps 2 MiB pages only
// where a program asks for them; this allocator asks, for every buffer of
// at least one huge page. docs/benchmarks-log.md ("Weights on huge pages")
// has the measured effect.
//
// Where huge pages are off or unavailable the buffer is ordinary memory: the
// request is advice, never a failure.
#pragma once

#include <cstddef>
#include <new>

namespace attn::kernels {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// At least `bytes` bytes (never null; throws std::bad_alloc): when `bytes`
// >= kHugePageBytes a fresh mapping aligned to a huge page whose whole huge
// pages are advised onto huge pages (the tail keeps 4 KiB pages, so no
// buffer wastes more than one), zeros until written; else from malloc.
// Release with FreeHugePageBytes and the same `bytes`.
void* AllocateHugePageBytes(size_t bytes);
void FreeHugePageBytes(void* p, size_t bytes);

// The same, as a standard allocator: std::vector<float, HugePageAllocator<float>>.
template <typename T>
struct HugePageAllocator {
  using value_type = T;

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: allocators convert implicitly

  T* allocate(size_t n) {
    if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(AllocateHugePageBytes(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) { FreeHugePageBytes(p, n * sizeof(T)); }

  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const HugePageAllocator<U>&) const {
    return false;
  }
};

}  // namespace attn::kernels
