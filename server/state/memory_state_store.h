// A shared state tier in this process's memory: the StateStore contract
// with nothing between the engine and its entries, for tests of what uses a
// tier (the engine, a server) without Redis, as LevelDB's in-memory Env is
// for its users. Entries are stored and verified as Redis holds them
// (EncodeStoredState, VerifyStoredState), so a test that edits one sees the
// same miss. Lookups answer before they return. No TTL, no bound: a test's
// entries live as long as the store. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/state/state_store.h"

namespace attn::serving {

class InMemoryStateStore final : public StateStore {
 public:
  // `observer` (may be null) hears of every lookup and write, as from Redis.
  explicit InMemoryStateStore(StateStoreObserver* observer = nullptr);

  void Lookup(StoreLookup lookup) override;
  void Write(const std::string& fingerprint, uint64_t origin, std::vector<int64_t> tokens,
             std::shared_ptr<const SavedRow> row) override;
  absl::Duration timeout() const override { return absl::Seconds(1); }

  int64_t entries() const;
  // Replaces the bytes of every entry of `fingerprint` with `edit` of them
  // (a test's corruption); returns how many it changed.
  int64_t EditEntries(const std::string& fingerprint, void (*edit)(std::string* bytes));

 private:
  StateStoreObserver no_observer_;
  StateStoreObserver* const observer_;
  mutable absl::Mutex mu_;
  // By fingerprint and the key of the tokens (StateCache::Key).
  std::map<std::pair<std::string, uint64_t>, std::string> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace attn::serving
