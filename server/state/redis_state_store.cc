#include "server/state/redis_state_store.h"

#include <pthread.h>

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "model/backend/backend.h"
#include "server/state/state_blob.h"
#include "server/state/state_cache.h"
#include "server/state/stored_state.h"

namespace attn::serving {
namespace {

using Command = std::vector<std::string>;
using Outcome = StateStoreObserver::Outcome;

constexpr size_t kMaxBatch = 64;
// Candidates checked per lookup in the second round trip, longest first.
constexpr size_t kMaxCandidates = 16;
// Writes are not waited for: they may take longer than a lookup's budget.
constexpr absl::Duration kWriteTimeout = absl::Seconds(2);

std::string Hex(uint64_t value) { return absl::StrCat(absl::Hex(value, absl::kZeroPad16)); }

int64_t AnchorOf(int64_t position) { return (position - 1) / kIndexStride * kIndexStride; }

}  // namespace

std::string RedisStateStore::EntryKey(const std::string& fingerprint, uint64_t key) {
  return absl::StrCat("attn:state:v", kStoredStateVersion, ":", fingerprint, ":", Hex(key));
}

std::string RedisStateStore::IndexKey(const std::string& fingerprint, uint64_t key) {
  return absl::StrCat("attn:index:v", kStoredStateVersion, ":", fingerprint, ":", Hex(key));
}

absl::StatusOr<std::unique_ptr<RedisStateStore>> RedisStateStore::Start(
    const StateStoreOptions& options, StateStoreObserver* observer) {
  absl::StatusOr<RedisAddress> address = ParseRedisUrl(options.url);
  if (!address.ok()) return address.status();
  if (options.ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError("--state_store_ttl: must be at least 1s");
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--state_store_timeout: must be positive");
  }
  std::unique_ptr<RedisStateStore> store(new RedisStateStore(options, *address, observer));
  RedisStateStore* s = store.get();
  store->lookup_thread_ = std::thread(
      [s] { s->Work(&s->lookups_, [s](std::vector<PendingLookup>& b) { s->Answer(b); }); });
  store->write_thread_ = std::thread(
      [s] { s->Work(&s->writes_, [s](std::vector<PendingWrite>& b) { s->WriteBatch(b); }); });
  return store;
}

RedisStateStore::RedisStateStore(const StateStoreOptions& options, const RedisAddress& address,
                                 StateStoreObserver* observer)
    : options_(options),
      observer_(observer ? observer : &no_observer_),
      lookup_redis_(address, *options.clock),
      write_redis_(address, *options.clock) {}

RedisStateStore::~RedisStateStore() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  lookup_thread_.join();
  write_thread_.join();
  std::deque<PendingLookup> unanswered;
  {
    absl::MutexLock lock(&mu_);
    unanswered.swap(lookups_);
  }
  for (PendingLookup& pending : unanswered) pending.lookup.done({});
}

void RedisStateStore::Lookup(StoreLookup lookup) {
  const absl::Time deadline = options_.clock->Now() + options_.timeout;
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      lookups_.push_back({std::move(lookup), deadline});
      return;
    }
  }
  lookup.done({});
}

void RedisStateStore::Write(const std::string& fingerprint, uint64_t origin,
                            std::vector<int64_t> tokens, std::shared_ptr<const SavedRow> row) {
  PendingWrite write{fingerprint, origin, std::move(tokens), std::move(row), 0};
  write.bytes = write.row->bytes() + static_cast<int64_t>(write.tokens.size() * sizeof(int32_t));
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_ && queued_write_bytes_ + write.bytes <= options_.max_queued_write_bytes) {
      queued_write_bytes_ += write.bytes;
      writes_.push_back(std::move(write));
      return;
    }
  }
  observer_->OnDroppedWrite();
}

template <typename Item, typename Serve>
void RedisStateStore::Work(std::deque<Item>* queue, Serve serve) {
  pthread_setname_np(pthread_self(), "attn-store");
  while (true) {
    std::vector<Item> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this, queue]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue->empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      while (!queue->empty() && batch.size() < kMaxBatch) {
        Taken(queue->front());
        batch.push_back(std::move(queue->front()));
        queue->pop_front();
      }
    }
    serve(batch);
  }
}

void RedisStateStore::WriteBatch(std::vector<PendingWrite>& batch) {
  const std::string ttl_ms = std::to_string(absl::ToInt64Milliseconds(options_.ttl));
  std::vector<Command> commands;
  int64_t bytes = 0;
  for (const PendingWrite& w : batch) {
    const std::vector<uint64_t> keys = StateCache::Keys(w.tokens, w.origin);
    const auto p = static_cast<int64_t>(w.tokens.size());
    const int64_t anchor = AnchorOf(p);
    const std::string blob = EncodeStateBlob({w.fingerprint, p, w.row});
    std::string value = EncodeStoredState(w.origin, w.tokens, blob);
    bytes += static_cast<int64_t>(value.size());
    const std::string index = IndexKey(w.fingerprint, anchor == 0 ? w.origin : keys[anchor - 1]);
    commands.push_back(
        {"SET", EntryKey(w.fingerprint, keys.back()), std::move(value), "PX", ttl_ms});
    commands.push_back({"SADD", index, std::to_string(p)});
    commands.push_back({"PEXPIRE", index, ttl_ms});
  }
  absl::StatusOr<std::vector<RedisReply>> replies = write_redis_.Pipeline(commands, kWriteTimeout);
  observer_->OnConnected(write_redis_.connected());
  if (!replies.ok()) {
    observer_->OnError();
    return;
  }
  for (const RedisReply& reply : *replies) {
    if (reply.type == RedisReply::Type::kError) observer_->OnError();
  }
  observer_->OnWrite(static_cast<int64_t>(batch.size()), bytes);
}

// One batch of lookups through the three round trips: the index sets of
// every anchor each prompt passes, which of their positions still exist,
// and the entry of the longest. Each step ends the lookups it settles; a
// round trip that fails ends all that are open.
class RedisStateStore::LookupRound {
 public:
  LookupRound(RedisStateStore& store, std::vector<PendingLookup>& batch);
  void Run() {
    if (!probes_.empty() && FindCandidates() && KeepExisting()) ReadLongest();
  }

 private:
  // One lookup's progress through the round trips.
  struct Probe {
    StoreLookup* lookup = nullptr;
    std::vector<uint64_t> keys;       // of each prefix
    std::vector<int64_t> candidates;  // stored positions, longest first
    int64_t chosen = 0;               // the position read in the last round
    bool finished = false;
  };

  absl::StatusOr<std::vector<RedisReply>> RoundTrip(const std::vector<Command>& commands);
  void Finish(Probe& probe, Outcome outcome, StoreHit hit = {});
  bool FindCandidates();
  bool KeepExisting();
  void ReadLongest();

  RedisStateStore& store_;
  const absl::Time start_;
  absl::Time deadline_ = absl::InfiniteFuture();  // the batch's earliest
  std::vector<Probe> probes_;
  std::vector<std::pair<size_t, int64_t>> asked_;  // per command: probe, position
};

RedisStateStore::LookupRound::LookupRound(RedisStateStore& store, std::vector<PendingLookup>& batch)
    : store_(store), start_(store.options_.clock->Now()) {
  for (PendingLookup& pending : batch) {
    StoreLookup& lookup = pending.lookup;
    const auto n = static_cast<int64_t>(lookup.tokens.size());
    if (start_ >= pending.deadline || n < 2 || lookup.min_tokens > n - 1) {
      store_.observer_->OnLookup(start_ >= pending.deadline ? Outcome::kTimeout : Outcome::kMiss,
                                 absl::ZeroDuration(), 0);
      lookup.done({});
      continue;
    }
    probes_.push_back({&lookup, StateCache::Keys(lookup.tokens, lookup.origin), {}, 0, false});
    deadline_ = std::min(deadline_, pending.deadline);
  }
}

void RedisStateStore::LookupRound::Finish(Probe& probe, Outcome outcome, StoreHit hit) {
  probe.finished = true;
  const int64_t tokens = hit.tokens;
  store_.observer_->OnLookup(outcome, store_.options_.clock->Now() - start_, tokens);
  probe.lookup->done(std::move(hit));
}

absl::StatusOr<std::vector<RedisReply>> RedisStateStore::LookupRound::RoundTrip(
    const std::vector<Command>& commands) {
  RedisConnection& redis = store_.lookup_redis_;
  absl::StatusOr<std::vector<RedisReply>> replies =
      redis.Pipeline(commands, deadline_ - store_.options_.clock->Now());
  store_.observer_->OnConnected(redis.connected());
  if (!replies.ok()) {
    const bool timeout = replies.status().code() == absl::StatusCode::kDeadlineExceeded;
    if (!timeout) store_.observer_->OnError();
    for (Probe& probe : probes_) {
      if (!probe.finished) Finish(probe, timeout ? Outcome::kTimeout : Outcome::kError);
    }
  }
  return replies;
}

bool RedisStateStore::LookupRound::FindCandidates() {
  std::vector<Command> commands;
  asked_.clear();
  for (size_t i = 0; i < probes_.size(); ++i) {
    const StoreLookup& l = *probes_[i].lookup;
    const auto n = static_cast<int64_t>(l.tokens.size());
    for (int64_t a = AnchorOf(std::max<int64_t>(l.min_tokens, 1)); a + 1 <= n - 1;
         a += kIndexStride) {
      const uint64_t key = a == 0 ? l.origin : probes_[i].keys[a - 1];
      commands.push_back({"SMEMBERS", IndexKey(l.fingerprint, key)});
      asked_.emplace_back(i, a);
    }
  }
  absl::StatusOr<std::vector<RedisReply>> replies = RoundTrip(commands);
  if (!replies.ok()) return false;
  for (size_t r = 0; r < asked_.size(); ++r) {
    Probe& probe = probes_[asked_[r].first];
    const int64_t a = asked_[r].second, n = static_cast<int64_t>(probe.lookup->tokens.size());
    for (const RedisReply& member : (*replies)[r].elements) {
      int64_t p = 0;
      if (absl::SimpleAtoi(member.text, &p) && p > a && p <= a + kIndexStride && p <= n - 1 &&
          p >= probe.lookup->min_tokens) {
        probe.candidates.push_back(p);
      }
    }
  }
  return true;
}

bool RedisStateStore::LookupRound::KeepExisting() {
  std::vector<Command> commands;
  asked_.clear();
  for (size_t i = 0; i < probes_.size(); ++i) {
    Probe& probe = probes_[i];
    std::sort(probe.candidates.rbegin(), probe.candidates.rend());
    probe.candidates.erase(std::unique(probe.candidates.begin(), probe.candidates.end()),
                           probe.candidates.end());
    if (probe.candidates.size() > kMaxCandidates) probe.candidates.resize(kMaxCandidates);
    if (probe.candidates.empty()) {
      Finish(probe, Outcome::kMiss);
      continue;
    }
    for (int64_t p : probe.candidates) {  // the index outlives expired entries
      commands.push_back({"EXISTS", EntryKey(probe.lookup->fingerprint, probe.keys[p - 1])});
      asked_.emplace_back(i, p);
    }
  }
  if (commands.empty()) return false;
  absl::StatusOr<std::vector<RedisReply>> replies = RoundTrip(commands);
  if (!replies.ok()) return false;
  for (size_t r = 0; r < asked_.size(); ++r) {
    Probe& probe = probes_[asked_[r].first];
    if (probe.chosen == 0 && (*replies)[r].integer == 1) probe.chosen = asked_[r].second;
  }
  return true;
}

void RedisStateStore::LookupRound::ReadLongest() {
  std::vector<Command> commands;
  asked_.clear();
  for (size_t i = 0; i < probes_.size(); ++i) {
    Probe& probe = probes_[i];
    if (probe.finished) continue;
    if (probe.chosen == 0) {
      Finish(probe, Outcome::kMiss);
      continue;
    }
    commands.push_back({"GET", EntryKey(probe.lookup->fingerprint, probe.keys[probe.chosen - 1])});
    asked_.emplace_back(i, probe.chosen);
  }
  if (commands.empty()) return;
  absl::StatusOr<std::vector<RedisReply>> replies = RoundTrip(commands);
  if (!replies.ok()) return;
  for (size_t r = 0; r < asked_.size(); ++r) {
    Probe& probe = probes_[asked_[r].first];
    const StoreLookup& l = *probe.lookup;
    const int64_t p = asked_[r].second;
    StoreHit hit;
    if ((*replies)[r].type == RedisReply::Type::kString) {
      absl::StatusOr<StateBlob> blob = VerifyStoredState(
          (*replies)[r].text, l.origin,
          absl::MakeConstSpan(l.tokens.data(), static_cast<size_t>(p)), l.fingerprint);
      if (blob.ok()) {
        hit = {p, blob->row};
      } else {
        store_.observer_->OnVerifyFailure();
      }
    }
    Finish(probe, hit.tokens > 0 ? Outcome::kHit : Outcome::kMiss, std::move(hit));
  }
}

void RedisStateStore::Answer(std::vector<PendingLookup>& batch) { LookupRound(*this, batch).Run(); }

}  // namespace attn::serving
