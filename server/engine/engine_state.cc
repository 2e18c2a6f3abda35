// The engine's state reuse: the state cache (server/state/state_cache.h), the
// shared tier (server/state/state_store.h), and the states requests bring
// (EngineRequest::start_state) and take (EngineRequest::return_state).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/engine/engine_impl.h"
#include "util/field_error.h"

namespace attn::serving {

using engine_internal::Cacheable;

void Engine::Impl::StartSequence(Sequence& seq) {
  if (seq.request.start_state) {
    if (absl::Status loaded = backend_->LoadRow(seq.slot, *seq.request.start_state); !loaded.ok()) {
      EndWithError(seq,
                   InvalidField("state", "does not fit this model's state: ", loaded.message()));
      return;
    }
    seq.saved_base = seq.request.start_state;
    return;
  }
  const std::vector<int64_t>& prompt = seq.request.prompt;
  StateCache::Hit hit;
  if (cache_ && Cacheable(seq)) {
    hit = cache_->Lookup(prompt, seq.request.cache_origin);
    if (hit.tokens > 0 && !backend_->LoadRow(seq.slot, hit.state->row).ok()) {
      // Cannot happen for a state this backend saved; start from its origin.
      backend_->ResetRow(seq.slot).IgnoreError();
      hit = {};
    }
    observer_->OnCacheLookup(hit.tokens, static_cast<int64_t>(prompt.size()));
  }
  if (hit.tokens == 0) {
    if (seq.request.initial_state) {
      if (absl::Status loaded = backend_->LoadRow(seq.slot, *seq.request.initial_state);
          !loaded.ok()) {
        EndWithError(seq, FieldError(absl::StatusCode::kInternal, "initial_state",
                                     "does not fit this model's state: ", loaded.message()));
        return;
      }
    }
    FetchFromStore(seq);
    return;
  }
  seq.prefilled = seq.cache_hit = hit.tokens;
  seq.saved_base = std::shared_ptr<const SavedRow>(hit.state, &hit.state->row);
  if (!seq.prefilling()) {  // the whole prompt: its logits came with it
    seq.last_logits = hit.state->logits;
    const auto vocab = static_cast<int64_t>(seq.last_logits.size());
    Emit(seq, seq.continuation->Sample(seq.last_logits.data(), vocab));
    return;
  }
  FetchFromStore(seq);
}

void Engine::Impl::FetchFromStore(Sequence& seq) {
  StateStore* store = options_.state_store;
  const std::vector<int64_t>& prompt = seq.request.prompt;
  if (store == nullptr || !Cacheable(seq) ||
      static_cast<int64_t>(prompt.size()) - seq.prefilled < 2) {
    return;
  }
  auto fetch = std::make_shared<engine_internal::StoreFetch>();
  // The tier answers by then; should no answer come, prefill regardless.
  fetch->give_up = clock_.Now() + 2 * store->timeout() + absl::Milliseconds(50);
  seq.fetch = fetch;
  store->Lookup({options_.state_fingerprint, seq.request.cache_origin, prompt, seq.prefilled + 1,
                 [fetch, signal = signal_](StoreHit hit) {
                   {
                     absl::MutexLock lock(&fetch->mu);
                     fetch->answered = true;
                     fetch->hit = std::move(hit);
                   }
                   signal->Wake();
                 }});
}

bool Engine::Impl::ApplyFetches(absl::Time now) {
  if (options_.state_store == nullptr) return false;  // nothing is ever fetched
  bool applied = false;
  for (auto& seq : active_) {
    if (!seq->fetching() || !seq->stream) continue;
    StoreHit hit;
    {
      absl::MutexLock lock(&seq->fetch->mu);
      if (!seq->fetch->answered && now < seq->fetch->give_up) continue;
      hit = std::move(seq->fetch->hit);
    }
    seq->fetch.reset();
    applied = true;
    if (hit.tokens > seq->prefilled && backend_->LoadRow(seq->slot, *hit.row).ok()) {
      seq->prefilled = seq->cache_hit = hit.tokens;
      seq->saved_base = hit.row;
    } else if (hit.tokens > 0) {
      // A verified entry whose tensors do not fit: the row may be half
      // written, so start over from the prompt's beginning.
      backend_->ResetRow(seq->slot).IgnoreError();
      seq->prefilled = seq->cache_hit = 0;
      seq->saved_base.reset();
      if (seq->request.initial_state) {
        backend_->LoadRow(seq->slot, *seq->request.initial_state).IgnoreError();
      }
    }
  }
  return applied;
}

void Engine::Impl::WriteToStore(const Sequence& seq, std::vector<int64_t> tokens,
                                const SavedRow& row) {
  if (options_.state_store == nullptr) return;
  // Past the bound a state stays local: the tier's copies cost their size
  // in every replica's reads, and a hybrid's grows with the context.
  const int64_t bound = options_.max_exported_state_bytes;
  if (bound > 0 && row.bytes() > bound) return;
  options_.state_store->Write(options_.state_fingerprint, seq.request.cache_origin,
                              std::move(tokens), std::make_shared<const SavedRow>(row));
}

void Engine::Impl::SaveCheckpoint(Sequence& seq) {
  if (!Cacheable(seq) || (!cache_ && options_.state_store == nullptr)) return;
  const std::vector<int64_t>& prompt = seq.request.prompt;
  const bool at_end = !seq.prefilling();
  // Checkpoints within a prompt are the local cache's; the tier keeps ends.
  if (!at_end && (!cache_ || seq.prefilled % options_.state_cache_interval != 0)) return;
  const absl::Span<const int64_t> tokens(prompt.data(), seq.prefilled);
  // A prompt's end is worth keeping with its logits even when a checkpoint
  // without them is there.
  if (!at_end && cache_->Contains(tokens, seq.request.cache_origin)) return;
  absl::StatusOr<SavedRow> row = backend_->SaveRowOnto(seq.slot, seq.saved_base.get());
  if (!row.ok()) return;  // the cache is an optimisation: go on without it
  if (at_end) WriteToStore(seq, {tokens.begin(), tokens.end()}, *row);
  if (!cache_) {
    seq.saved_base = std::make_shared<const SavedRow>(*std::move(row));
    return;
  }
  auto state = std::make_shared<CachedState>();
  state->row = *std::move(row);
  if (at_end) state->logits = seq.last_logits;
  const std::shared_ptr<const SavedRow> base = std::move(seq.saved_base);
  seq.saved_base = std::shared_ptr<const SavedRow>(state, &state->row);
  CacheState(seq, tokens, std::move(state), base.get());
}

bool Engine::Impl::CanFeedLast(const Sequence& seq) const {
  const int64_t limit = backend_->max_context();
  const int64_t in_state =
      seq.request.start_tokens + static_cast<int64_t>(seq.request.prompt.size()) + seq.generated;
  return limit < 0 || in_state <= limit;
}

std::vector<int64_t> Engine::Impl::StateTokens(const Sequence& seq) const {
  std::vector<int64_t> tokens = seq.request.prompt;
  const int64_t fed = seq.last_fed ? seq.generated : seq.generated - 1;
  tokens.insert(tokens.end(), seq.generated_ids.begin(), seq.generated_ids.begin() + fed);
  return tokens;
}

absl::Status Engine::Impl::SaveFinished(Sequence& seq, StreamEvent& last) {
  const bool for_cache =
      (cache_ || options_.state_store != nullptr) && Cacheable(seq) && seq.generated > 0;
  if (!for_cache && !seq.request.return_state) {
    if (seq.request.return_state_tokens) last.state_token_ids = StateTokens(seq);
    return absl::OkStatus();
  }
  absl::StatusOr<SavedRow> row = backend_->SaveRowOnto(seq.slot, seq.saved_base.get());
  if (!row.ok()) {
    if (!seq.request.return_state) return absl::OkStatus();
    return absl::InternalError(
        absl::StrCat("the sequence's state could not be copied out: ", row.status().message()));
  }
  auto saved = std::make_shared<const SavedRow>(*std::move(row));
  std::vector<int64_t> tokens = StateTokens(seq);
  // Past the prompt: its end is cached already, with the logits after it.
  if (for_cache && tokens.size() > seq.request.prompt.size()) {
    WriteToStore(seq, tokens, *saved);
    if (cache_) {
      auto state = std::make_shared<CachedState>();
      state->row = *saved;  // shares the tensors: both only read them
      CacheState(seq, tokens, std::move(state), seq.saved_base.get());
    }
  }
  if (seq.request.return_state) {
    last.state = std::move(saved);
    last.state_tokens = seq.request.start_tokens + static_cast<int64_t>(tokens.size());
  }
  if (seq.request.return_state || seq.request.return_state_tokens) {
    last.state_token_ids = std::move(tokens);
  }
  return absl::OkStatus();
}

void Engine::Impl::CacheState(const Sequence& seq, absl::Span<const int64_t> tokens,
                              std::shared_ptr<CachedState> state, const SavedRow* base) {
  StateCache::Mover mover;
  if (base != nullptr && state->row.written != base->written) {
    mover = [this, base,
             copy = state](const CachedState& entry) -> std::shared_ptr<const CachedState> {
      absl::StatusOr<SavedRow> moved = backend_->ViewOnto(entry.row, *base, copy->row);
      if (!moved.ok() || moved->written == entry.row.written) return nullptr;
      auto out = std::make_shared<CachedState>();
      out->row = *std::move(moved);
      out->logits = entry.logits;
      return out;
    };
  }
  cache_->Insert(tokens, std::move(state), seq.request.cache_origin, mover);
  PublishCacheSize();
}

void Engine::Impl::PublishCacheSize() {
  cache_entries_ = cache_->entries();
  cache_bytes_ = cache_->bytes();
  observer_->OnCacheSize(cache_->entries(), cache_->bytes());
}

}  // namespace attn::serving
