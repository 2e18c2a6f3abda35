#include "server/engine/scheduler.h"

#include <algorithm>
#include <tuple>

namespace attn::serving::engine_internal {

bool Cacheable(const Sequence& seq) { return !seq.scoring() && !seq.request.start_state; }

Scheduler::Admissions Scheduler::Admit(std::deque<std::unique_ptr<Sequence>>* waiting,
                                       absl::Time now, int64_t free_slots, int64_t budget,
                                       int64_t* reserved) const {
  Admissions out;
  for (auto it = waiting->begin(); it != waiting->end();) {
    Sequence& seq = **it;
    if (seq.stream->cancelled()) {
      out.dropped.emplace_back(std::move(*it),
                               absl::CancelledError("the client cancelled the request"));
    } else if (now >= seq.request.deadline) {
      out.dropped.emplace_back(std::move(*it), absl::DeadlineExceededError(
                                                   "the request's deadline passed while queued"));
    } else {
      ++it;
      continue;
    }
    it = waiting->erase(it);
  }
  while (!waiting->empty() && static_cast<int64_t>(out.admitted.size()) < free_slots &&
         *reserved + waiting->front()->reservation <= budget) {
    *reserved += waiting->front()->reservation;
    out.admitted.push_back(std::move(waiting->front()));
    waiting->pop_front();
  }
  return out;
}

std::vector<std::pair<Sequence*, absl::Status>> Scheduler::Abandoned(const Sequences& active,
                                                                     absl::Time now) const {
  std::vector<std::pair<Sequence*, absl::Status>> ended;
  for (const auto& seq : active) {
    if (!seq->stream) continue;
    if (seq->stream->cancelled()) {
      ended.emplace_back(seq.get(), absl::CancelledError("the client cancelled the request"));
    } else if (now >= seq->request.deadline) {
      ended.emplace_back(seq.get(), absl::DeadlineExceededError("the request's deadline passed"));
    }
  }
  return ended;
}

int64_t Scheduler::ChunkLength(const Sequence& seq) const {
  const int64_t remaining = static_cast<int64_t>(seq.request.prompt.size()) - seq.prefilled;
  int64_t chunk = std::min(options_.prefill_chunk, remaining);
  if (cache_checkpoints_ && Cacheable(seq)) {
    const int64_t interval = options_.state_cache_interval;
    chunk = std::min(chunk, interval - seq.prefilled % interval);
  }
  return chunk;
}

std::vector<Sequence*> Scheduler::PrefillGroup(const Sequences& active) const {
  std::vector<Sequence*> group;
  int64_t count = 0;
  for (const auto& candidate : active) {
    if (!candidate->stream || !candidate->prefilling() || candidate->fetching()) continue;
    const int64_t chunk = ChunkLength(*candidate);
    if (group.empty()) {
      group.push_back(candidate.get());
      count = chunk;
      if (candidate->scoring()) break;  // scored alone: it reports every position
      continue;
    }
    // Rows of one prefill share a position and a chunk length; the tokens of
    // the whole group stay within one chunk's budget.
    if (!candidate->scoring() &&
        candidate->request.start_tokens + candidate->prefilled ==
            group[0]->request.start_tokens + group[0]->prefilled &&
        chunk == count &&
        static_cast<int64_t>(group.size() + 1) * count <= options_.prefill_chunk) {
      group.push_back(candidate.get());
    }
  }
  return group;
}

std::vector<Sequence*> Scheduler::DecodeBatch(const Sequences& active) const {
  std::vector<Sequence*> ready;
  for (const auto& seq : active) {
    if (seq->stream && !seq->prefilling() && seq->next_token >= 0 && !seq->stream->full()) {
      ready.push_back(seq.get());
    }
  }
  const auto cap = static_cast<size_t>(std::max<int64_t>(1, options_.max_decode_rows));
  if (ready.size() <= cap) return ready;
  // Least attained service first; among equals, the longest unserved.
  std::nth_element(
      ready.begin(), ready.begin() + cap, ready.end(), [](const Sequence* a, const Sequence* b) {
        return std::tie(a->generated, a->last_decoded) < std::tie(b->generated, b->last_decoded);
      });
  ready.resize(cap);
  return ready;
}

}  // namespace attn::serving::engine_internal
