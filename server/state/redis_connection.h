// One connection to Redis (hiredis, synchronous), for the shared state
// store's threads: commands go out as one pipeline and their replies come
// back together, so a batch costs one round trip. A failure (Redis down,
// a timeout, a reply that is not one) drops the connection; the next call
// reconnects, but not before a backoff that doubles from 50 ms to 2 s after
// each failed attempt, so an outage costs a few probes a second and a
// recovery is noticed within 2 s. Not thread-safe: one thread per object.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "util/clock.h"

struct redisContext;

namespace attn::serving {

// Where Redis is: redis://[[USER]:PASSWORD@]HOST[:PORT][/DB].
struct RedisAddress {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string user;
  std::string password;
};

// kInvalidArgument naming --state_store for anything else (rediss:// too:
// Debian's hiredis 0.14 has no TLS).
absl::StatusOr<RedisAddress> ParseRedisUrl(const std::string& url);

struct RedisReply {
  enum class Type { kNil, kInteger, kString, kArray, kStatus, kError };
  Type type = Type::kNil;
  int64_t integer = 0;
  std::string text;  // a string, status or error
  std::vector<RedisReply> elements;
};

class RedisConnection {
 public:
  // `clock` times the reconnect backoff; it must outlive the connection.
  explicit RedisConnection(RedisAddress address, const Clock& clock = RealClock());
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Sends `commands` (each its arguments) and returns their replies in
  // order, all within `timeout` per socket operation. kUnavailable when
  // Redis cannot be reached (or the backoff has not passed), kDeadlineExceeded
  // on a timeout; the connection is dropped either way.
  absl::StatusOr<std::vector<RedisReply>> Pipeline(
      const std::vector<std::vector<std::string>>& commands, absl::Duration timeout);

  bool connected() const { return context_ != nullptr; }

 private:
  absl::Status Connect(absl::Duration timeout);
  absl::Status Fail(const std::string& what);

  const RedisAddress address_;
  const Clock& clock_;
  redisContext* context_ = nullptr;
  absl::Time retry_at_ = absl::InfinitePast();
  absl::Duration backoff_ = absl::ZeroDuration();
};

}  // namespace attn::serving
