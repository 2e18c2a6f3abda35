#include "server/state/state_cache.h"

#include <unordered_set>
#include <utility>

namespace attn::serving {
namespace {

// splitmix64's finaliser: every bit of the previous key and the token
// reaches every bit of the next key.
uint64_t Mix(uint64_t key, int64_t token) {
  uint64_t x = key ^ (static_cast<uint64_t>(token) + 0x9e3779b97f4a7c15ULL + (key << 6));
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// An entry's own bytes: all but its tensors' memory.
int64_t OwnBytes(const CachedState& state, size_t tokens) {
  return static_cast<int64_t>(state.logits.size() * sizeof(float)) +
         static_cast<int64_t>(tokens * sizeof(int32_t));
}

const void* MemoryOf(const torch::Tensor& t) { return t.storage().unsafeGetStorageImpl(); }

}  // namespace

int64_t StateCache::MemoryBytes(const CachedState& state,
                                const std::unordered_map<const void*, Memory>* held) {
  int64_t bytes = 0;
  std::unordered_set<const void*> counted;
  for (const torch::Tensor& t : state.row.tensors) {
    const void* memory = MemoryOf(t);
    if ((held == nullptr || held->count(memory) == 0) && counted.insert(memory).second) {
      bytes += static_cast<int64_t>(t.storage().nbytes());
    }
  }
  return bytes;
}

StateCache::StateCache(int64_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

std::vector<uint64_t> StateCache::Keys(absl::Span<const int64_t> tokens, uint64_t origin) {
  std::vector<uint64_t> keys(tokens.size());
  uint64_t key = origin;
  for (size_t i = 0; i < tokens.size(); ++i) keys[i] = key = Mix(key, tokens[i]);
  return keys;  // each element is Key() of a prefix
}

uint64_t StateCache::Key(absl::Span<const int64_t> tokens, uint64_t origin) {
  uint64_t key = origin;
  for (int64_t token : tokens) key = Mix(key, token);
  return key;
}

bool StateCache::Holds(const Entry& entry, absl::Span<const int64_t> tokens, size_t count,
                       uint64_t origin) {
  if (entry.origin != origin || entry.tokens.size() != count || count > tokens.size()) {
    return false;
  }
  for (size_t i = 0; i < count; ++i) {
    if (entry.tokens[i] != tokens[i]) return false;
  }
  return true;
}

StateCache::Hit StateCache::Lookup(absl::Span<const int64_t> tokens, uint64_t origin) {
  const std::vector<uint64_t> keys = Keys(tokens, origin);
  for (size_t count = tokens.size(); count > 0; --count) {
    auto it = entries_.find(keys[count - 1]);
    if (it == entries_.end() || !Holds(it->second, tokens, count, origin)) continue;
    // All of the tokens: usable only with the logits that come after them.
    if (count == tokens.size() && it->second.state->logits.empty()) continue;
    recency_.splice(recency_.begin(), recency_, it->second.recency);
    return {static_cast<int64_t>(count), it->second.state};
  }
  return {};
}

bool StateCache::Contains(absl::Span<const int64_t> tokens, uint64_t origin) const {
  if (tokens.empty()) return false;
  auto it = entries_.find(Key(tokens, origin));
  return it != entries_.end() && Holds(it->second, tokens, tokens.size(), origin);
}

void StateCache::Insert(absl::Span<const int64_t> tokens, std::shared_ptr<const CachedState> state,
                        uint64_t origin, const Mover& moved) {
  if (tokens.empty() || !state) return;
  const int64_t bytes = OwnBytes(*state, tokens.size());
  if (bytes + MemoryBytes(*state, nullptr) > capacity_bytes_) return;
  if (moved) Move(tokens, moved, origin);
  const uint64_t key = Key(tokens, origin);
  if (auto it = entries_.find(key); it != entries_.end()) Erase(it);
  while (bytes_ + bytes + MemoryBytes(*state, &memory_) > capacity_bytes_ && !recency_.empty()) {
    Erase(entries_.find(recency_.back()));
  }
  HoldMemory(*state, +1);
  recency_.push_front(key);
  Entry& entry = entries_[key];
  entry.origin = origin;
  entry.tokens.assign(tokens.begin(), tokens.end());
  entry.state = std::move(state);
  entry.bytes = bytes;
  entry.recency = recency_.begin();
  bytes_ += bytes;
}

void StateCache::Move(absl::Span<const int64_t> tokens, const Mover& moved, uint64_t origin) {
  const std::vector<uint64_t> keys = Keys(tokens, origin);
  for (size_t count = 1; count <= tokens.size(); ++count) {
    auto it = entries_.find(keys[count - 1]);
    if (it == entries_.end() || !Holds(it->second, tokens, count, origin)) continue;
    std::shared_ptr<const CachedState> state = moved(*it->second.state);
    if (!state) continue;
    // Held first, then let go: memory both view is never counted out.
    HoldMemory(*state, +1);
    HoldMemory(*it->second.state, -1);
    bytes_ -= it->second.bytes;
    it->second.bytes = OwnBytes(*state, count);
    bytes_ += it->second.bytes;
    it->second.state = std::move(state);
  }
}

void StateCache::Erase(std::unordered_map<uint64_t, Entry>::iterator it) {
  bytes_ -= it->second.bytes;
  HoldMemory(*it->second.state, -1);
  recency_.erase(it->second.recency);
  entries_.erase(it);
}

void StateCache::HoldMemory(const CachedState& state, int change) {
  for (const torch::Tensor& t : state.row.tensors) {
    Memory& memory = memory_[MemoryOf(t)];
    if (memory.holders == 0) {
      memory.bytes = static_cast<int64_t>(t.storage().nbytes());
      bytes_ += memory.bytes;
    }
    memory.holders += change;
    if (memory.holders == 0) {
      bytes_ -= memory.bytes;
      memory_.erase(MemoryOf(t));
    }
  }
}

}  // namespace attn::serving
