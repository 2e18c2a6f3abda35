// The shared state tier (--state_store): sequences' states kept outside the
// process, so that any replica resumes any conversation from the longest
// prefix of its prompt that some replica stored, and a stateless chat
// client that resends its history prefills only its new tokens wherever its
// turn lands.
//
// This is the tier's contract, which the engine uses. Implementations:
// RedisStateStore (redis_state_store.h), the one --state_store starts, and
// InMemoryStateStore (memory_state_store.h), one process's map, for tests
// of what uses a tier, as LevelDB's in-memory Env is for its users.
//
// Writes (at a prompt's end and where a generation finished) and lookups
// (on a local cache miss) must not block the engine: a store answers a
// lookup within timeout() or the engine prefills regardless. An entry that
// does not verify (origin, tokens, fingerprint, checksums) is a miss, never
// served. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "util/clock.h"

namespace attn {
struct SavedRow;  // model/backend/backend.h
}  // namespace attn

namespace attn::serving {

struct StateStoreOptions {
  std::string url;  // redis://...; empty: no shared tier
  absl::Duration ttl = absl::Hours(1);
  absl::Duration timeout = absl::Milliseconds(20);  // a lookup's budget
  int64_t max_queued_write_bytes = int64_t{64} << 20;
  // Times lookups' budgets and the reconnect backoff; must outlive the store.
  const Clock* clock = &RealClock();
};

// What the tier did, for metrics. Called from the store's threads.
class StateStoreObserver {
 public:
  enum class Outcome { kHit, kMiss, kTimeout, kError };
  virtual ~StateStoreObserver() = default;
  virtual void OnLookup(Outcome /*outcome*/, absl::Duration /*took*/, int64_t /*tokens*/) {}
  virtual void OnVerifyFailure() {}
  virtual void OnError() {}
  // A batch of `entries` writes landed, `bytes` in all.
  virtual void OnWrite(int64_t /*entries*/, int64_t /*bytes*/) {}
  virtual void OnDroppedWrite() {}
  virtual void OnConnected(bool /*connected*/) {}
};

// The longest verified stored prefix a lookup found; tokens 0: none.
struct StoreHit {
  int64_t tokens = 0;
  std::shared_ptr<const SavedRow> row;  // on the CPU
};

struct StoreLookup {
  std::string fingerprint;  // the model's (ModelFingerprint)
  uint64_t origin = 0;      // StateCache's origin of the tokens
  std::vector<int64_t> tokens;
  int64_t min_tokens = 1;  // shorter hits are of no use (the local cache has them)
  // Called once with the result, on a store thread (or at once when the
  // store is stopping); must not block.
  std::function<void(StoreHit)> done;
};

class StateStore {
 public:
  virtual ~StateStore() = default;

  // Looks for the longest stored prefix of `lookup.tokens` that is shorter
  // than all of them and at least min_tokens long; calls lookup.done once,
  // on a store thread or before returning.
  virtual void Lookup(StoreLookup lookup) = 0;
  // Stores the state after `tokens` (`origin`: StateCache's origin of
  // them); may drop it (a full queue), never blocks.
  virtual void Write(const std::string& fingerprint, uint64_t origin, std::vector<int64_t> tokens,
                     std::shared_ptr<const SavedRow> row) = 0;
  // How long a lookup may take before it answers a miss.
  virtual absl::Duration timeout() const = 0;
};

}  // namespace attn::serving
