#include "util/memory.h"

#include <gtest/gtest.h>

namespace attn {
namespace {

TEST(Memory, MemAvailableIsReadInBytes) {
  EXPECT_EQ(MemAvailableFromMeminfo("MemTotal:       24554040 kB\n"
                                    "MemFree:         1000000 kB\n"
                                    "MemAvailable:   20000000 kB\n"
                                    "Buffers:          123456 kB\n"),
            int64_t{20000000} * 1024);
  EXPECT_EQ(MemAvailableFromMeminfo("MemTotal: 1 kB\n"), std::nullopt);
  EXPECT_EQ(MemAvailableFromMeminfo("MemAvailable: lots kB\n"), std::nullopt);
  EXPECT_EQ(MemAvailableFromMeminfo("MemAvailable: 12\n"), std::nullopt);  // no unit
  EXPECT_EQ(MemAvailableFromMeminfo("MemAvailable: 99999999999999999999 kB\n"), std::nullopt);
  EXPECT_EQ(MemAvailableFromMeminfo(""), std::nullopt);
}

TEST(Memory, CgroupHeadroomIsTheLimitLessWhatIsUsed) {
  EXPECT_EQ(CgroupV2Headroom("8589934592\n", "1073741824\n"), int64_t{7} << 30);
  EXPECT_EQ(CgroupV2Headroom("1000\n", "4000\n"), 0);  // over the limit: none left
  EXPECT_EQ(CgroupV2Headroom("max\n", "1073741824\n"), std::nullopt);
  EXPECT_EQ(CgroupV2Headroom("", ""), std::nullopt);  // no cgroup v2 files
}

TEST(Memory, ThisMachineHasSomeMemoryAvailable) {
  std::optional<int64_t> available = AvailableMemoryBytes();
  ASSERT_TRUE(available.has_value());  // Linux has MemAvailable since 3.14
  EXPECT_GT(*available, 0);
}

}  // namespace
}  // namespace attn
