#include "server/store/state_store.h"

#include <pthread.h>

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "model/backend/backend.h"
#include "server/state_blob.h"
#include "server/state_cache.h"
#include "server/store/stored_state.h"

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

// One lookup's progress through the round trips.
struct Probe {
  StoreLookup* lookup = nullptr;
  std::vector<uint64_t> keys;       // of each prefix
  std::vector<int64_t> candidates;  // stored positions, longest first
  int64_t chosen = 0;               // the position read in the last round
  bool finished = false;
};

int64_t AnchorOf(int64_t position) { return (position - 1) / kIndexStride * kIndexStride; }

}  // namespace

std::string StateStore::EntryKey(const std::string& fingerprint, uint64_t key) {
  return absl::StrCat("attn:state:v", kStoredStateVersion, ":", fingerprint, ":", Hex(key));
}

std::string StateStore::IndexKey(const std::string& fingerprint, uint64_t key) {
  return absl::StrCat("attn:index:v", kStoredStateVersion, ":", fingerprint, ":", Hex(key));
}

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Start(const StateStoreOptions& options,
                                                              StateStoreObserver* observer) {
  absl::StatusOr<RedisAddress> address = ParseRedisUrl(options.url);
  if (!address.ok()) return address.status();
  if (options.ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError("--state_store_ttl: must be at least 1s");
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--state_store_timeout: must be positive");
  }
  std::unique_ptr<StateStore> store(new StateStore(options, *address, observer));
  store->lookup_thread_ = std::thread([s = store.get()] { s->LookupLoop(); });
  store->write_thread_ = std::thread([s = store.get()] { s->WriteLoop(); });
  return store;
}

StateStore::StateStore(const StateStoreOptions& options, const RedisAddress& address,
                       StateStoreObserver* observer)
    : options_(options),
      observer_(observer ? observer : &no_observer_),
      lookup_redis_(address),
      write_redis_(address) {}

StateStore::~StateStore() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  lookup_thread_.join();
  write_thread_.join();
  std::deque<StoreLookup> unanswered;
  {
    absl::MutexLock lock(&mu_);
    unanswered.swap(lookups_);
  }
  for (StoreLookup& lookup : unanswered) lookup.done({});
}

void StateStore::Lookup(StoreLookup lookup) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      lookups_.push_back(std::move(lookup));
      return;
    }
  }
  lookup.done({});
}

void StateStore::Write(const std::string& fingerprint, uint64_t origin, std::vector<int64_t> tokens,
                       std::shared_ptr<const SavedRow> row) {
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

void StateStore::LookupLoop() {
  pthread_setname_np(pthread_self(), "attn-store");
  while (true) {
    std::vector<StoreLookup> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !lookups_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      while (!lookups_.empty() && batch.size() < kMaxBatch) {
        batch.push_back(std::move(lookups_.front()));
        lookups_.pop_front();
      }
    }
    Answer(batch, lookup_redis_);
  }
}

void StateStore::WriteLoop() {
  pthread_setname_np(pthread_self(), "attn-store");
  while (true) {
    std::vector<PendingWrite> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !writes_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      while (!writes_.empty() && batch.size() < kMaxBatch) {
        queued_write_bytes_ -= writes_.front().bytes;
        batch.push_back(std::move(writes_.front()));
        writes_.pop_front();
      }
    }
    WriteBatch(batch, write_redis_);
  }
}

void StateStore::WriteBatch(std::vector<PendingWrite>& batch, RedisConnection& redis) {
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
  absl::StatusOr<std::vector<RedisReply>> replies = redis.Pipeline(commands, kWriteTimeout);
  observer_->OnConnected(redis.connected());
  if (!replies.ok()) {
    observer_->OnError();
    return;
  }
  for (const RedisReply& reply : *replies) {
    if (reply.type == RedisReply::Type::kError) observer_->OnError();
  }
  observer_->OnWrite(bytes);
}

void StateStore::Answer(std::vector<StoreLookup>& batch, RedisConnection& redis) {
  const absl::Time start = absl::Now();
  std::vector<Probe> probes;
  absl::Time deadline = absl::InfiniteFuture();
  for (StoreLookup& lookup : batch) {
    const auto n = static_cast<int64_t>(lookup.tokens.size());
    if (start >= lookup.deadline || n < 2 || lookup.min_tokens > n - 1) {
      observer_->OnLookup(start >= lookup.deadline ? Outcome::kTimeout : Outcome::kMiss,
                          absl::ZeroDuration(), 0);
      lookup.done({});
      continue;
    }
    probes.push_back({&lookup, StateCache::Keys(lookup.tokens, lookup.origin), {}, 0, false});
    deadline = std::min(deadline, lookup.deadline);
  }
  // Ends the lookups still open with `outcome`.
  auto finish_all = [&](Outcome outcome) {
    for (Probe& p : probes) {
      if (p.finished) continue;
      p.finished = true;
      observer_->OnLookup(outcome, absl::Now() - start, 0);
      p.lookup->done({});
    }
  };
  auto round_trip =
      [&](const std::vector<Command>& commands) -> absl::StatusOr<std::vector<RedisReply>> {
    absl::StatusOr<std::vector<RedisReply>> replies =
        redis.Pipeline(commands, deadline - absl::Now());
    observer_->OnConnected(redis.connected());
    if (!replies.ok()) {
      if (replies.status().code() != absl::StatusCode::kDeadlineExceeded) observer_->OnError();
      finish_all(replies.status().code() == absl::StatusCode::kDeadlineExceeded ? Outcome::kTimeout
                                                                                : Outcome::kError);
    }
    return replies;
  };
  if (probes.empty()) return;

  // 1: the index sets of every anchor the prompt passes.
  std::vector<Command> commands;
  std::vector<std::pair<size_t, int64_t>> asked;  // probe, anchor
  for (size_t i = 0; i < probes.size(); ++i) {
    const StoreLookup& l = *probes[i].lookup;
    const auto n = static_cast<int64_t>(l.tokens.size());
    for (int64_t a = AnchorOf(std::max<int64_t>(l.min_tokens, 1)); a + 1 <= n - 1;
         a += kIndexStride) {
      const uint64_t key = a == 0 ? l.origin : probes[i].keys[a - 1];
      commands.push_back({"SMEMBERS", IndexKey(l.fingerprint, key)});
      asked.emplace_back(i, a);
    }
  }
  absl::StatusOr<std::vector<RedisReply>> replies = round_trip(commands);
  if (!replies.ok()) return;
  for (size_t r = 0; r < asked.size(); ++r) {
    Probe& probe = probes[asked[r].first];
    const int64_t a = asked[r].second, n = static_cast<int64_t>(probe.lookup->tokens.size());
    for (const RedisReply& member : (*replies)[r].elements) {
      int64_t p = 0;
      if (absl::SimpleAtoi(member.text, &p) && p > a && p <= a + kIndexStride && p <= n - 1 &&
          p >= probe.lookup->min_tokens) {
        probe.candidates.push_back(p);
      }
    }
  }
  // 2: which candidates exist (the index outlives expired entries).
  commands.clear();
  asked.clear();
  for (size_t i = 0; i < probes.size(); ++i) {
    Probe& probe = probes[i];
    std::sort(probe.candidates.rbegin(), probe.candidates.rend());
    probe.candidates.erase(std::unique(probe.candidates.begin(), probe.candidates.end()),
                           probe.candidates.end());
    if (probe.candidates.size() > kMaxCandidates) probe.candidates.resize(kMaxCandidates);
    if (probe.candidates.empty()) {
      probe.finished = true;
      observer_->OnLookup(Outcome::kMiss, absl::Now() - start, 0);
      probe.lookup->done({});
      continue;
    }
    for (int64_t p : probe.candidates) {
      commands.push_back({"EXISTS", EntryKey(probe.lookup->fingerprint, probe.keys[p - 1])});
      asked.emplace_back(i, p);
    }
  }
  if (commands.empty()) return;
  replies = round_trip(commands);
  if (!replies.ok()) return;
  for (size_t r = 0; r < asked.size(); ++r) {
    Probe& probe = probes[asked[r].first];
    if (probe.chosen == 0 && (*replies)[r].integer == 1) probe.chosen = asked[r].second;
  }
  // 3: the longest that exists.
  commands.clear();
  asked.clear();
  for (size_t i = 0; i < probes.size(); ++i) {
    Probe& probe = probes[i];
    if (probe.finished) continue;
    if (probe.chosen == 0) {
      probe.finished = true;
      observer_->OnLookup(Outcome::kMiss, absl::Now() - start, 0);
      probe.lookup->done({});
      continue;
    }
    commands.push_back({"GET", EntryKey(probe.lookup->fingerprint, probe.keys[probe.chosen - 1])});
    asked.emplace_back(i, probe.chosen);
  }
  if (commands.empty()) return;
  replies = round_trip(commands);
  if (!replies.ok()) return;
  for (size_t r = 0; r < asked.size(); ++r) {
    Probe& probe = probes[asked[r].first];
    const StoreLookup& l = *probe.lookup;
    const int64_t p = asked[r].second;
    StoreHit hit;
    if ((*replies)[r].type == RedisReply::Type::kString) {
      absl::StatusOr<StateBlob> blob = VerifyStoredState(
          (*replies)[r].text, l.origin,
          absl::MakeConstSpan(l.tokens.data(), static_cast<size_t>(p)), l.fingerprint);
      if (blob.ok()) {
        hit = {p, blob->row};
      } else {
        observer_->OnVerifyFailure();
      }
    }
    probe.finished = true;
    observer_->OnLookup(hit.tokens > 0 ? Outcome::kHit : Outcome::kMiss, absl::Now() - start,
                        hit.tokens);
    probe.lookup->done(std::move(hit));
  }
}

}  // namespace attn::serving
