#include "model/cpus.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace attn
