#include "util/hash64.h"

#include <cstring>

namespace attn {

namespace {

constexpr uint64_t kHashMul = 0x9fb21c651e98df25ULL;

uint64_t Finalize(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t Hash64(absl::string_view bytes, uint64_t seed) {
  uint64_t h = Finalize(seed ^ (bytes.size() * kHashMul));
  const size_t words = bytes.size() / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + 8 * i, 8);
    h = (h ^ word) * kHashMul;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  if (bytes.size() > 8 * words)
    std::memcpy(&tail, bytes.data() + 8 * words, bytes.size() - 8 * words);
  return Finalize((h ^ tail) * kHashMul);
}

}  // namespace attn
