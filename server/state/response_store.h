// Stored responses of OpenAI's Responses API (POST /v1/responses with
// "store"): what GET /v1/responses/{id} returns and what a later turn's
// previous_response_id continues. The store keeps opaque records (the HTTP
// front end's JSON) under their ids; the recurrent state a record's
// conversation ends in lives in the state cache and the shared tier, keyed
// by its tokens, not here.
//
// A record expires `ttl` after it was stored (--response_ttl). This
// process's records are bounded by bytes (--response_store_bytes): past
// that, the oldest go first, as if they had expired. With Redis (the state
// tier's --state_store) every record is also written there, under
// "attn:response:v1:<id>" with the same expiry, so that a turn landing on
// any replica finds its previous response. Redis then answers lookups
// (a record deleted through another replica is gone everywhere); this
// process's copies answer only while Redis cannot be reached.
//
// Thread-safe. Put never blocks on Redis (its writes queue for the store's
// thread); Get and Delete answer at once without Redis, or from the store's
// thread once Redis has.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "util/clock.h"

namespace attn::serving {

struct ResponseStoreOptions {
  absl::Duration ttl = absl::Hours(1);
  int64_t capacity_bytes = int64_t{256} << 20;
  std::string redis_url;  // redis://...; empty: this process's memory only
  absl::Duration redis_timeout = absl::Milliseconds(500);
  // Times expiry and Redis's reconnect backoff; must outlive the store.
  const Clock* clock = &RealClock();

  // kInvalidArgument naming the flag out of range (--response_ttl,
  // --response_store_bytes).
  absl::Status Validate() const;
};

// What the store did, for metrics. Called from any thread.
class ResponseStoreObserver {
 public:
  enum class Removal { kExpired, kEvicted, kDeleted };
  virtual ~ResponseStoreObserver() = default;
  // This process's records after a change.
  virtual void OnSize(int64_t /*records*/, int64_t /*bytes*/) {}
  virtual void OnRemoved(Removal /*why*/, int64_t /*records*/) {}
  // A Redis round trip failed, or a write was dropped (its queue was full).
  virtual void OnRedisError() {}
};

class ResponseStore {
 public:
  // kInvalidArgument for options out of range or a Redis URL that does not
  // parse. `observer` may be null; it must outlive the store.
  static absl::StatusOr<std::unique_ptr<ResponseStore>> Start(const ResponseStoreOptions& options,
                                                              ResponseStoreObserver* observer);
  ~ResponseStore();  // stops the store's thread; queued Redis writes are dropped
  ResponseStore(const ResponseStore&) = delete;
  ResponseStore& operator=(const ResponseStore&) = delete;

  // Keeps `record` under `id` (replacing one of that id) for ttl. A record
  // larger than the capacity is kept in Redis only.
  void Put(const std::string& id, std::string record);

  // The record of `id`; kNotFound when no store has it (expired, deleted,
  // never stored), kUnavailable when only Redis could say and it cannot be
  // reached. `done` runs once: at once, or on the store's thread.
  using GetDone = std::function<void(absl::StatusOr<std::string>)>;
  void Get(const std::string& id, GetDone done);

  // Removes `id` here and in Redis; `done` gets whether any store had it
  // (kUnavailable as Get's).
  using DeleteDone = std::function<void(absl::StatusOr<bool>)>;
  void Delete(const std::string& id, DeleteDone done);

  absl::Duration ttl() const;

 private:
  class Impl;
  explicit ResponseStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace attn::serving
