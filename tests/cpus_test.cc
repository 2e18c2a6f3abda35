#include "util/cpus.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

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

TEST(Cpus, CpuListsParseAsTasksetWritesThem) {
  EXPECT_EQ(ParseCpuList("3").value(), std::vector<int>({3}));
  EXPECT_EQ(ParseCpuList("0-3").value(), std::vector<int>({0, 1, 2, 3}));
  EXPECT_EQ(ParseCpuList("6,0-1,1").value(), std::vector<int>({0, 1, 6}));
  for (const char* bad : {"", "a", "1-", "3-1", "-2", "1,,2", "0-99999"}) {
    const auto parsed = ParseCpuList(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseCpuList("2,x").status().message().find("\"x\""), std::string::npos);
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 6, 8, 9}), "0-3,6,8-9");
  EXPECT_EQ(FormatCpuList({}), "");
}

// Pins a new thread to one allowed CPU: its own mask and that of a thread it
// starts (as an engine thread starts its OpenMP team) say so, and the rest
// of the process keeps its mask.
TEST(Cpus, APinnedThreadAndItsChildrenStayOnTheirCpus) {
  const std::vector<int> allowed = AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  const std::vector<int> one = {allowed.back()};
  std::vector<int> pinned, child;
  std::thread thread([&] {
    ASSERT_TRUE(PinCallingThread(one).ok());
    pinned = AllowedCpus();
    std::thread([&] { child = AllowedCpus(); }).join();
  });
  thread.join();
  EXPECT_EQ(pinned, one);
  EXPECT_EQ(child, one);
  EXPECT_EQ(AllowedCpus(), allowed);
}

TEST(Cpus, PinningToACpuOutsideTheMaskNamesIt) {
  std::vector<int> before = AllowedCpus();
  const absl::Status status = PinCallingThread({1000});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("CPUs 1000"), std::string::npos) << status.message();
  EXPECT_EQ(PinCallingThread({-1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PinCallingThread({}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AllowedCpus(), before);
}

}  // namespace
}  // namespace attn
