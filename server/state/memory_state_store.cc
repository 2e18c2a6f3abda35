#include "server/state/memory_state_store.h"

#include "server/state/state_blob.h"
#include "server/state/state_cache.h"
#include "server/state/stored_state.h"

namespace attn::serving {

InMemoryStateStore::InMemoryStateStore(StateStoreObserver* observer)
    : observer_(observer != nullptr ? observer : &no_observer_) {}

void InMemoryStateStore::Lookup(StoreLookup lookup) {
  const std::vector<uint64_t> keys = StateCache::Keys(lookup.tokens, lookup.origin);
  StoreHit hit;
  {
    absl::MutexLock lock(&mu_);
    // The longest stored prefix shorter than all the tokens, as Redis's.
    for (auto p = static_cast<int64_t>(lookup.tokens.size()) - 1;
         p >= lookup.min_tokens && hit.tokens == 0; --p) {
      auto found = entries_.find({lookup.fingerprint, keys[p - 1]});
      if (found == entries_.end()) continue;
      absl::StatusOr<StateBlob> blob =
          VerifyStoredState(found->second, lookup.origin,
                            absl::MakeConstSpan(lookup.tokens.data(), p), lookup.fingerprint);
      if (!blob.ok()) {
        observer_->OnVerifyFailure();
        continue;
      }
      hit = {p, blob->row};
    }
  }
  observer_->OnLookup(
      hit.tokens > 0 ? StateStoreObserver::Outcome::kHit : StateStoreObserver::Outcome::kMiss,
      absl::ZeroDuration(), hit.tokens);
  lookup.done(std::move(hit));
}

void InMemoryStateStore::Write(const std::string& fingerprint, uint64_t origin,
                               std::vector<int64_t> tokens, std::shared_ptr<const SavedRow> row) {
  const auto p = static_cast<int64_t>(tokens.size());
  std::string bytes = EncodeStoredState(origin, tokens, EncodeStateBlob({fingerprint, p, row}));
  const auto size = static_cast<int64_t>(bytes.size());
  {
    absl::MutexLock lock(&mu_);
    entries_[{fingerprint, StateCache::Key(tokens, origin)}] = std::move(bytes);
  }
  observer_->OnWrite(1, size);
}

int64_t InMemoryStateStore::entries() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(entries_.size());
}

int64_t InMemoryStateStore::EditEntries(const std::string& fingerprint,
                                        void (*edit)(std::string* bytes)) {
  absl::MutexLock lock(&mu_);
  int64_t edited = 0;
  for (auto& [key, bytes] : entries_) {
    if (key.first != fingerprint) continue;
    edit(&bytes);
    ++edited;
  }
  return edited;
}

}  // namespace attn::serving
