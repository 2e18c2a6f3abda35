// The state cache of one model: sequences' states keyed by the exact tokens
// they cover, so that a request whose tokens start with a cached sequence's
// prefills only the rest, at token granularity.
//
// Keys are a chain of 64-bit hashes, one per token (h_i = Mix(h_{i-1},
// t_i)): one pass over a prompt gives the key of each of its prefixes, so
// finding the longest cached one costs a hash-map probe per token. A key
// that matches is verified against the tokens the entry stores before it is
// used, so a hash collision costs a miss, never a wrong state.
//
// Entries are bounded by bytes, least recently used out first. The bytes
// are what the entries really hold: their logits, tokens and the memory of
// their states' tensors, each block of memory once however many entries
// view it (the cached turns of one conversation share their key/value
// prefix, LmBackend::SaveRowOnto).
//
// Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/types/span.h"
#include "model/backend/backend.h"
#include "server/state/sequence_origin.h"

namespace attn::serving {

// A sequence's state after its tokens.
struct CachedState {
  SavedRow row;
  // The model's logits after the last token: [vocab] when the state was
  // saved at a prompt's end (a request with exactly these tokens then needs
  // no prefill at all); empty otherwise.
  std::vector<float> logits;
};

class StateCache {
 public:
  explicit StateCache(int64_t capacity_bytes);

  struct Hit {
    int64_t tokens = 0;  // 0: a miss
    std::shared_ptr<const CachedState> state;
  };
  // `origin` below is where sequences start before their tokens
  // (sequence_origin.h): the empty sequence, or a named initial state
  // (--initial_states). Entries of different origins never match each
  // other, even with the same tokens.
  // The longest cached prefix of `tokens` that continues it: one of fewer
  // tokens, or of all of them when the entry has logits (the next token is
  // sampled from them). Marks the entry used.
  Hit Lookup(absl::Span<const int64_t> tokens, uint64_t origin = kEmptySequenceOrigin);
  // Whether the state after exactly `tokens` is cached (marks nothing).
  bool Contains(absl::Span<const int64_t> tokens, uint64_t origin = kEmptySequenceOrigin) const;
  // Maps a cached state to the same sequence's state held in other memory
  // (LmBackend::ViewOnto), or to null where it stays as it is.
  using Mover = std::function<std::shared_ptr<const CachedState>(const CachedState&)>;
  // Keeps `state` as the state after `tokens` (at least one), replacing any
  // entry for the same key, and drops the least recently used entries until
  // it fits. A state larger than the whole capacity is not kept. Before
  // anything is dropped, when `moved` is given and `state` is kept, the
  // cached states of `tokens`' beginnings move as Move says.
  void Insert(absl::Span<const int64_t> tokens, std::shared_ptr<const CachedState> state,
              uint64_t origin = kEmptySequenceOrigin, const Mover& moved = nullptr);
  // Each cached state of a beginning of `tokens` (some or all of them)
  // for which `moved` returns a state takes that state in its place,
  // keeping its place in the recency order.
  void Move(absl::Span<const int64_t> tokens, const Mover& moved,
            uint64_t origin = kEmptySequenceOrigin);

  int64_t entries() const { return static_cast<int64_t>(entries_.size()); }
  int64_t bytes() const { return bytes_; }
  int64_t capacity_bytes() const { return capacity_bytes_; }

  // The key chain of `tokens` after `origin`: element i is the key of the
  // first i + 1.
  static std::vector<uint64_t> Keys(absl::Span<const int64_t> tokens,
                                    uint64_t origin = kEmptySequenceOrigin);
  // The key of all of `tokens` (Keys(tokens).back()), without the chain.
  static uint64_t Key(absl::Span<const int64_t> tokens, uint64_t origin = kEmptySequenceOrigin);

 private:
  struct Entry {
    uint64_t origin = kEmptySequenceOrigin;
    std::vector<int32_t> tokens;  // vocabularies fit int32: half the bytes
    std::shared_ptr<const CachedState> state;
    int64_t bytes = 0;
    std::list<uint64_t>::iterator recency;  // in recency_
  };
  // Whether `entry` holds exactly the first `count` of `tokens` after `origin`.
  static bool Holds(const Entry& entry, absl::Span<const int64_t> tokens, size_t count,
                    uint64_t origin);
  void Erase(std::unordered_map<uint64_t, Entry>::iterator it);
  struct Memory {
    int64_t holders = 0;  // entries' tensors that view it
    int64_t bytes = 0;
  };
  // The bytes of the memory behind `state`'s tensors, each block once,
  // leaving out those in `held` (null: none).
  static int64_t MemoryBytes(const CachedState& state,
                             const std::unordered_map<const void*, Memory>* held);
  // Counts `state`'s memory as held by one more entry (+1) or one fewer (-1).
  void HoldMemory(const CachedState& state, int change);

  const int64_t capacity_bytes_;
  int64_t bytes_ = 0;
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> recency_;                     // keys, most recently used first
  std::unordered_map<const void*, Memory> memory_;  // by storage
};

}  // namespace attn::serving
