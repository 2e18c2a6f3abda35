// The shared state tier in Redis (--state_store=redis://...).
//
// Entries are StoredStates (server/state/stored_state.h): the tokens and
// the StateBlob, under the key chain the local cache computes
// (StateCache::Keys) after the model's fingerprint, with a TTL
// (--state_store_ttl). An entry after p tokens is also listed, by its
// position, in an index set named by the key of the first a tokens, where a
// is p - 1 rounded down to a multiple of kIndexStride: a reader finds every
// stored position within its prompt in one pipelined round trip over
// n / kIndexStride sets, checks the candidates exist in a second, and reads
// the longest in a third. Each reader batches whatever lookups have queued
// into the same three round trips.
//
// A write that does not fit the bounded queue is dropped and counted; a
// lookup answers a miss once its time budget (--state_store_timeout)
// passes. Redis down, slow or restarting costs only misses: the connections
// reconnect with a backoff of at most 2 s (server/state/redis_connection.h).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/state/redis_connection.h"
#include "server/state/state_store.h"
#include "util/clock.h"

namespace attn::serving {

inline constexpr int64_t kIndexStride = 64;

class RedisStateStore final : public StateStore {
 public:
  // Parses the URL and starts the threads; Redis need not be up yet.
  // kInvalidArgument naming --state_store for a URL that is not one.
  static absl::StatusOr<std::unique_ptr<RedisStateStore>> Start(const StateStoreOptions& options,
                                                                StateStoreObserver* observer);
  ~RedisStateStore() override;  // answers pending lookups with misses and joins

  // Within the options' timeout from now (past it: a miss).
  void Lookup(StoreLookup lookup) override;
  // Dropped (and counted) if the queue is full.
  void Write(const std::string& fingerprint, uint64_t origin, std::vector<int64_t> tokens,
             std::shared_ptr<const SavedRow> row) override;
  absl::Duration timeout() const override { return options_.timeout; }

  const StateStoreOptions& options() const { return options_; }

  // Redis's key names: an entry, and the index set of an anchor.
  static std::string EntryKey(const std::string& fingerprint, uint64_t key);
  static std::string IndexKey(const std::string& fingerprint, uint64_t key);

 private:
  struct PendingWrite {
    std::string fingerprint;
    uint64_t origin = 0;
    std::vector<int64_t> tokens;
    std::shared_ptr<const SavedRow> row;
    int64_t bytes = 0;
  };
  struct PendingLookup {
    StoreLookup lookup;
    absl::Time deadline;
  };
  class LookupRound;  // one batch of lookups through the three round trips

  RedisStateStore(const StateStoreOptions& options, const RedisAddress& address,
                  StateStoreObserver* observer);
  // The loop of the store's two threads: waits for items in `queue` (one
  // of the two below), takes up to kMaxBatch of them, and serves them
  // outside the lock, until the store stops.
  template <typename Item, typename Serve>
  void Work(std::deque<Item>* queue, Serve serve);
  // What taking an item off its queue releases.
  void Taken(const PendingLookup&) {}
  void Taken(const PendingWrite& write) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    queued_write_bytes_ -= write.bytes;
  }
  // Answers a batch of lookups in three pipelined round trips.
  void Answer(std::vector<PendingLookup>& batch);
  void WriteBatch(std::vector<PendingWrite>& batch);

  const StateStoreOptions options_;
  StateStoreObserver no_observer_;
  StateStoreObserver* const observer_;
  RedisConnection lookup_redis_;  // the lookup thread's
  RedisConnection write_redis_;   // the write thread's

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<PendingLookup> lookups_ ABSL_GUARDED_BY(mu_);
  std::deque<PendingWrite> writes_ ABSL_GUARDED_BY(mu_);
  int64_t queued_write_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread lookup_thread_;
  std::thread write_thread_;
};

}  // namespace attn::serving
