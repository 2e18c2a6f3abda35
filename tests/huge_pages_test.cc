// Weight copies ask for transparent huge pages (model/kernels/huge_pages.h):
// buffers of a huge page or more are aligned to one and their whole huge
// pages carry the kernel's huge-page advice, smaller ones come from malloc,
// and both hold data.
#include "model/kernels/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace attn::kernels {
namespace {

// The VmFlags line of the mapping that holds `p` in /proc/self/smaps, or ""
// when none is found.
std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto address = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream header(line);
    if (header >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= address && address < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

bool KernelHasTransparentHugePages() {
  std::ifstream enabled("/sys/kernel/mm/transparent_hugepage/enabled");
  return enabled.good();
}

TEST(HugePages, LargeBuffersAreAlignedAndAdvisedOntoHugePages) {
  std::vector<float, HugePageAllocator<float>> weights(3 * kHugePageBytes / sizeof(float) + 5,
                                                       1.5f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(weights.data()) % kHugePageBytes, 0u);
  EXPECT_EQ(weights.front(), 1.5f);
  EXPECT_EQ(weights.back(), 1.5f);
  if (!KernelHasTransparentHugePages()) GTEST_SKIP() << "this kernel has no transparent huge pages";
  // "hg": the mapping carries MADV_HUGEPAGE, whatever pages the kernel could find.
  const std::string flags = VmFlagsOf(weights.data());
  ASSERT_FALSE(flags.empty()) << "no mapping in /proc/self/smaps holds the buffer";
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
}

TEST(HugePages, AFinalPartialHugePageKeepsSmallPages) {
  if (!KernelHasTransparentHugePages()) GTEST_SKIP() << "this kernel has no transparent huge pages";
  const size_t bytes = kHugePageBytes + 100;
  auto* p = static_cast<char*>(AllocateHugePageBytes(bytes));
  p[0] = 1;
  p[bytes - 1] = 2;
  const std::string whole = VmFlagsOf(p), tail = VmFlagsOf(p + kHugePageBytes);
  FreeHugePageBytes(p, bytes);
  EXPECT_NE(whole.find(" hg"), std::string::npos) << whole;
  ASSERT_FALSE(tail.empty());
  EXPECT_EQ(tail.find(" hg"), std::string::npos) << tail;
}

TEST(HugePages, SmallBuffersComeFromMallocAndHoldData) {
  std::vector<int8_t, HugePageAllocator<int8_t>> values(1000, 7);
  values.push_back(-3);
  EXPECT_EQ(values[999], 7);
  EXPECT_EQ(values.back(), -3);
  void* empty = AllocateHugePageBytes(0);
  EXPECT_NE(empty, nullptr);
  FreeHugePageBytes(empty, 0);
}

}  // namespace
}  // namespace attn::kernels
