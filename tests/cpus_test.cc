#include "model/cpus.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include <thread>

namespace attn {
namespace {

TEST(Cpus, CgroupV2QuotaRoundsUp) {
  EXPECT_EQ(CpusFromCgroupV2("150000 100000"), 2);
  EXPECT_EQ(CpusFromCgroupV2("50000 100000"), 1);
  EXPECT_EQ(CpusFromCgroupV2("400000 100000\n"), 4);
  EXPECT_EQ(CpusFromCgroupV2("max 100000"), std::nullopt);
  EXPECT_EQ(CpusFromCgroupV2("garbage"), std::nullopt);
}

TEST(Cpus, UsableCpusIsWithinTheMachine) {
  const int cpus = UsableCpus();
  EXPECT_GE(cpus, 1);
  EXPECT_LE(cpus, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

TEST(Cpus, FreedTensorSizedBlocksStayInTheHeap) {
#ifdef __SANITIZE_ADDRESS__
  GTEST_SKIP() << "AddressSanitizer replaces malloc; glibc's settings do not apply";
#endif
  ASSERT_TRUE(KeepFreedMemoryForReuse());
  // An 8 MiB block, as a prefill's attention scores: without the setting
  // glibc maps it with mmap (a block counted in hblks) and unmaps it on free.
  const size_t mapped_before = mallinfo2().hblks;
  void* block = std::malloc(8 << 20);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, 8 << 20);
  EXPECT_EQ(mallinfo2().hblks, mapped_before);
  std::free(block);
  // Freed, it stays in the heap: the next one of that size reuses it.
  const size_t heap_after_free = mallinfo2().arena;
  block = std::malloc(8 << 20);
  EXPECT_EQ(mallinfo2().arena, heap_after_free);
  std::free(block);
}

}  // namespace
}  // namespace attn
