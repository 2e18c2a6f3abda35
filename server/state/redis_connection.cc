#include "server/state/redis_connection.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace attn::serving {
namespace {

constexpr absl::Duration kFirstBackoff = absl::Milliseconds(50);
constexpr absl::Duration kMaxBackoff = absl::Seconds(2);

timeval TimevalOf(absl::Duration d) { return absl::ToTimeval(std::max(d, absl::Milliseconds(1))); }

absl::Status BadUrl(const std::string& url, const std::string& what) {
  // The URL may hold a password: name the flag, never echo it.
  (void)url;
  return absl::InvalidArgumentError(absl::StrCat(
      "--state_store: ", what, "; expected redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]"));
}

RedisReply Convert(const redisReply* reply) {
  RedisReply out;
  switch (reply->type) {
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = reply->integer;
      break;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      out.type = reply->type == REDIS_REPLY_STRING   ? RedisReply::Type::kString
                 : reply->type == REDIS_REPLY_STATUS ? RedisReply::Type::kStatus
                                                     : RedisReply::Type::kError;
      out.text.assign(reply->str, reply->len);
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      for (size_t i = 0; i < reply->elements; ++i)
        out.elements.push_back(Convert(reply->element[i]));
      break;
    default:
      out.type = RedisReply::Type::kNil;
  }
  return out;
}

}  // namespace

absl::StatusOr<RedisAddress> ParseRedisUrl(const std::string& url) {
  if (absl::StartsWith(url, "rediss://")) {
    return BadUrl(url,
                  "TLS (rediss://) is not supported by this build's hiredis; reach Redis "
                  "over a trusted network or a TLS tunnel");
  }
  if (!absl::StartsWith(url, "redis://")) return BadUrl(url, "not a redis:// URL");
  std::string rest = url.substr(8);
  RedisAddress address;
  if (const size_t at = rest.rfind('@'); at != std::string::npos) {
    const std::string credentials = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = credentials.find(':');
    if (colon == std::string::npos)
      return BadUrl(url, "credentials need USER:PASSWORD or :PASSWORD");
    address.user = credentials.substr(0, colon);
    address.password = credentials.substr(colon + 1);
  }
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty() && (!absl::SimpleAtoi(db, &address.db) || address.db < 0)) {
      return BadUrl(url, "the database is not a number");
    }
  }
  if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
    if (!absl::SimpleAtoi(rest.substr(colon + 1), &address.port) || address.port <= 0 ||
        address.port > 65535) {
      return BadUrl(url, "the port is not a port number");
    }
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return BadUrl(url, "no host");
  address.host = rest;
  return address;
}

RedisConnection::RedisConnection(RedisAddress address, const Clock& clock)
    : address_(std::move(address)), clock_(clock) {}

RedisConnection::~RedisConnection() {
  if (context_ != nullptr) redisFree(context_);
}

absl::Status RedisConnection::Fail(const std::string& what) {
  if (context_ != nullptr) {
    redisFree(context_);
    context_ = nullptr;
  }
  backoff_ = backoff_ == absl::ZeroDuration() ? kFirstBackoff : std::min(2 * backoff_, kMaxBackoff);
  retry_at_ = clock_.Now() + backoff_;
  return absl::UnavailableError(
      absl::StrCat("redis ", address_.host, ":", address_.port, ": ", what));
}

absl::Status RedisConnection::Connect(absl::Duration timeout) {
  if (clock_.Now() < retry_at_) {
    return absl::UnavailableError("redis: reconnecting after a failure (backing off)");
  }
  context_ = redisConnectWithTimeout(address_.host.c_str(), address_.port, TimevalOf(timeout));
  if (context_ == nullptr) return Fail("cannot allocate a connection");
  if (context_->err) return Fail(context_->errstr);
  std::vector<std::vector<std::string>> setup;
  if (!address_.password.empty()) {
    if (address_.user.empty()) {
      setup.push_back({"AUTH", address_.password});
    } else {
      setup.push_back({"AUTH", address_.user, address_.password});
    }
  }
  if (address_.db != 0) setup.push_back({"SELECT", std::to_string(address_.db)});
  backoff_ = absl::ZeroDuration();  // connected: a later failure starts the backoff afresh
  if (setup.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<RedisReply>> replies = Pipeline(setup, timeout);
  if (!replies.ok()) return replies.status();
  for (const RedisReply& reply : *replies) {
    if (reply.type == RedisReply::Type::kError) return Fail("AUTH or SELECT: " + reply.text);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RedisReply>> RedisConnection::Pipeline(
    const std::vector<std::vector<std::string>>& commands, absl::Duration timeout) {
  if (context_ == nullptr) {
    if (absl::Status connected = Connect(timeout); !connected.ok()) return connected;
  }
  if (redisSetTimeout(context_, TimevalOf(timeout)) != REDIS_OK)
    return Fail("cannot set a timeout");
  for (const std::vector<std::string>& command : commands) {
    std::vector<const char*> argv;
    std::vector<size_t> lengths;
    for (const std::string& arg : command) {
      argv.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    if (redisAppendCommandArgv(context_, static_cast<int>(argv.size()), argv.data(),
                               lengths.data()) != REDIS_OK) {
      return Fail(context_->errstr);
    }
  }
  std::vector<RedisReply> replies;
  replies.reserve(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(context_, &raw) != REDIS_OK || raw == nullptr) {
      const bool timed_out =
          context_->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
      const absl::Status failed = Fail(context_->errstr[0] ? context_->errstr : "no reply");
      if (timed_out) return absl::DeadlineExceededError("redis: no reply within the time budget");
      return failed;
    }
    replies.push_back(Convert(static_cast<redisReply*>(raw)));
    freeReplyObject(raw);
  }
  return replies;
}

}  // namespace attn::serving
