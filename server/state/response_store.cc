#include "server/state/response_store.h"

#include <pthread.h>

#include <deque>
#include <list>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/state/redis_connection.h"
#include "util/field_error.h"

namespace attn::serving {
namespace {

// Redis writes waiting for the store's thread; more are dropped, as the
// state tier's are, rather than holding memory for a slow Redis.
constexpr size_t kMaxQueuedTasks = 4096;
// How often the store's thread drops expired records while idle, so the
// metrics follow expiry without traffic.
constexpr absl::Duration kPurgeEvery = absl::Seconds(1);

std::string RedisKey(const std::string& id) { return absl::StrCat("attn:response:v1:", id); }

absl::Status RedisError(const absl::Status& status) {
  return absl::UnavailableError(absl::StrCat(
      "the response store (Redis, --state_store) cannot be reached: ", status.message()));
}

ResponseStoreObserver& NoObserver() {
  static ResponseStoreObserver* none = new ResponseStoreObserver();
  return *none;
}

}  // namespace

absl::Status ResponseStoreOptions::Validate() const {
  if (ttl <= absl::ZeroDuration()) {
    return InvalidField("response_ttl",
                        absl::StrCat("must be positive, got ", absl::FormatDuration(ttl)));
  }
  if (capacity_bytes < 0) {
    return InvalidField("response_store_bytes",
                        absl::StrCat("must be at least 0, got ", capacity_bytes));
  }
  return absl::OkStatus();
}

class ResponseStore::Impl {
 public:
  Impl(const ResponseStoreOptions& options, ResponseStoreObserver* observer,
       std::unique_ptr<RedisConnection> redis)
      : options_(options),
        observer_(observer ? *observer : NoObserver()),
        redis_(std::move(redis)),
        thread_([this] { Work(); }) {}

  ~Impl() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }

  void Put(const std::string& id, std::string record) {
    if (redis_) {
      std::vector<std::string> set = {"SET", RedisKey(id), record, "PX",
                                      absl::StrCat(absl::ToInt64Milliseconds(options_.ttl))};
      Queue({[this, set = std::move(set)]() { Redis({set}).IgnoreError(); }, nullptr});
    }
    absl::MutexLock lock(&mu_);
    EraseLocked(id);
    const int64_t bytes = static_cast<int64_t>(record.size() + id.size());
    if (bytes <= options_.capacity_bytes) {
      order_.push_back(id);
      entries_[id] = {std::move(record), options_.clock->Now() + options_.ttl, bytes,
                      std::prev(order_.end())};
      bytes_ += bytes;
      int64_t evicted = 0;
      for (; bytes_ > options_.capacity_bytes; ++evicted) EraseLocked(order_.front());
      if (evicted > 0) observer_.OnRemoved(ResponseStoreObserver::Removal::kEvicted, evicted);
    }
    PurgeLocked();
    observer_.OnSize(static_cast<int64_t>(entries_.size()), bytes_);
  }

  // With Redis, Redis decides (another replica may have deleted a record
  // this one holds); this process's copies answer only while it cannot.
  // One thread runs this process's Redis work in order, so a Get sees the
  // Puts before it.
  void Get(const std::string& id, GetDone done) {
    if (!redis_) {
      std::optional<std::string> record = Local(id);
      return record ? done(*std::move(record)) : done(NotFound(id));
    }
    auto shared = std::make_shared<GetDone>(std::move(done));
    auto fallback = [this, id, shared](const absl::Status& status) {
      std::optional<std::string> record = Local(id);
      record ? (*shared)(*std::move(record)) : (*shared)(status);
    };
    Queue({[this, id, shared, fallback]() {
             absl::StatusOr<std::vector<RedisReply>> replies = Redis({{"GET", RedisKey(id)}});
             if (!replies.ok()) return fallback(replies.status());
             const RedisReply& reply = replies->front();
             if (reply.type != RedisReply::Type::kString) return (*shared)(NotFound(id));
             (*shared)(reply.text);
           },
           fallback});
  }

  void Delete(const std::string& id, DeleteDone done) {
    bool here = false;
    {
      absl::MutexLock lock(&mu_);
      here = EraseLocked(id);
      observer_.OnSize(static_cast<int64_t>(entries_.size()), bytes_);
    }
    if (here) observer_.OnRemoved(ResponseStoreObserver::Removal::kDeleted, 1);
    if (!redis_) return done(here);
    auto shared = std::make_shared<DeleteDone>(std::move(done));
    Queue({[this, id, here, shared]() {
             absl::StatusOr<std::vector<RedisReply>> replies = Redis({{"DEL", RedisKey(id)}});
             if (!replies.ok()) return here ? (*shared)(true) : (*shared)(replies.status());
             const bool there = replies->front().integer > 0;
             if (there && !here) observer_.OnRemoved(ResponseStoreObserver::Removal::kDeleted, 1);
             (*shared)(here || there);
           },
           [shared](const absl::Status& status) { (*shared)(status); }});
  }

  absl::Duration ttl() const { return options_.ttl; }

 private:
  struct Entry {
    std::string record;
    absl::Time expires;
    int64_t bytes = 0;
    std::list<std::string>::iterator order;
  };
  // Work for Redis, and the answer when it cannot run (a full queue, a
  // store that stops first); null for a write, which answers nobody.
  struct Task {
    std::function<void()> run;
    std::function<void(const absl::Status&)> fail;
  };

  static absl::Status NotFound(const std::string& id) {
    return FieldError(absl::StatusCode::kNotFound, "id",
                      absl::StrCat("no stored response ", id,
                                   " (never stored, deleted, or past --response_ttl)"));
  }

  // Runs `commands` on the store's thread's connection.
  absl::StatusOr<std::vector<RedisReply>> Redis(
      const std::vector<std::vector<std::string>>& commands) {
    absl::StatusOr<std::vector<RedisReply>> replies =
        redis_->Pipeline(commands, options_.redis_timeout);
    if (replies.ok() && !replies->empty() && replies->front().type == RedisReply::Type::kError) {
      replies = absl::InternalError(replies->front().text);
    }
    if (!replies.ok()) {
      observer_.OnRedisError();
      return RedisError(replies.status());
    }
    return replies;
  }

  void Queue(Task task) {
    {
      absl::MutexLock lock(&mu_);
      if (!stopping_ && tasks_.size() < kMaxQueuedTasks) {
        tasks_.push_back(std::move(task));
        return;
      }
    }
    observer_.OnRedisError();
    if (task.fail) {
      task.fail(absl::UnavailableError(
          "the response store's Redis queue is full or stopping; retry the request"));
    }
  }

  // This process's copy of `id`'s record.
  std::optional<std::string> Local(const std::string& id) {
    absl::MutexLock lock(&mu_);
    PurgeLocked();
    auto it = entries_.find(id);
    if (it == entries_.end()) return std::nullopt;
    return it->second.record;
  }

  bool EraseLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = entries_.find(id);
    if (it == entries_.end()) return false;
    bytes_ -= it->second.bytes;
    order_.erase(it->second.order);
    entries_.erase(it);
    return true;
  }

  // Every record has the same ttl, so the oldest expire first.
  void PurgeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time now = options_.clock->Now();
    int64_t expired = 0;
    while (!order_.empty() && entries_.at(order_.front()).expires <= now) {
      EraseLocked(order_.front());
      ++expired;
    }
    if (expired == 0) return;
    observer_.OnRemoved(ResponseStoreObserver::Removal::kExpired, expired);
    observer_.OnSize(static_cast<int64_t>(entries_.size()), bytes_);
  }

  void Work() {
    pthread_setname_np(pthread_self(), "attn-responses");
    while (true) {
      Task task;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopping_ || !tasks_.empty();
        };
        mu_.AwaitWithTimeout(absl::Condition(&ready), kPurgeEvery);
        if (stopping_) break;
        PurgeLocked();
        if (tasks_.empty()) continue;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task.run();
    }
    // Whoever waits on Redis gets an answer.
    std::deque<Task> left;
    {
      absl::MutexLock lock(&mu_);
      left.swap(tasks_);
    }
    for (Task& task : left) {
      if (task.fail) task.fail(absl::UnavailableError("the server is shutting down"));
    }
  }

  const ResponseStoreOptions options_;
  ResponseStoreObserver& observer_;
  const std::unique_ptr<RedisConnection> redis_;  // the store's thread's alone
  absl::Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> order_ ABSL_GUARDED_BY(mu_);  // ids, oldest first
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: it starts once the rest is ready
};

absl::StatusOr<std::unique_ptr<ResponseStore>> ResponseStore::Start(
    const ResponseStoreOptions& options, ResponseStoreObserver* observer) {
  if (absl::Status valid = options.Validate(); !valid.ok()) return valid;
  std::unique_ptr<RedisConnection> redis;
  if (!options.redis_url.empty()) {
    absl::StatusOr<RedisAddress> address = ParseRedisUrl(options.redis_url);
    if (!address.ok()) return address.status();
    redis = std::make_unique<RedisConnection>(*std::move(address), *options.clock);
  }
  return std::unique_ptr<ResponseStore>(
      new ResponseStore(std::make_unique<Impl>(options, observer, std::move(redis))));
}

ResponseStore::ResponseStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ResponseStore::~ResponseStore() = default;

void ResponseStore::Put(const std::string& id, std::string record) {
  impl_->Put(id, std::move(record));
}
void ResponseStore::Get(const std::string& id, GetDone done) { impl_->Get(id, std::move(done)); }
void ResponseStore::Delete(const std::string& id, DeleteDone done) {
  impl_->Delete(id, std::move(done));
}
absl::Duration ResponseStore::ttl() const { return impl_->ttl(); }

}  // namespace attn::serving
