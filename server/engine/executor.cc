// The engine's executor: it runs the steps the scheduler chose (a prefill
// chunk for a group of prompts, a decode step for a batch of sequences) on
// the backend, and turns their logits into tokens, events and ends.
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/backend/backend.h"
#include "model/lm/continuation.h"
#include "model/lm/sampling.h"
#include "server/engine/engine_impl.h"

namespace attn::serving {
namespace {

// Rows one sampling task takes: below twice this, a decode step samples on
// its own thread, where waking another would cost more than it saves.
constexpr int64_t kRowsPerSamplingTask = 8;

std::vector<float> RowToVector(const torch::Tensor& row) {
  torch::Tensor cpu = row.to(torch::kCPU, torch::kFloat).contiguous();
  return std::vector<float>(cpu.data_ptr<float>(), cpu.data_ptr<float>() + cpu.numel());
}

}  // namespace

void Engine::Impl::PushScores(Sequence& seq, const torch::Tensor& logits, int64_t begin,
                              int64_t count) {
  const auto& prompt = seq.request.prompt;
  torch::Tensor log_probs = torch::log_softmax(logits.to(torch::kFloat), -1).to(torch::kCPU);
  StreamEvent event;
  event.token_ids.assign(prompt.begin() + begin, prompt.begin() + begin + count);
  event.logprobs.resize(count);
  const auto& last = seq.last_logits;  // the previous chunk's prediction
  event.logprobs[0] = begin == 0
                          ? 0.0f
                          : static_cast<float>(LogSoftmaxAt(
                                last.data(), static_cast<int64_t>(last.size()), prompt[begin]));
  auto rows = log_probs.accessor<float, 2>();
  for (int64_t j = 0; j + 1 < count; ++j) event.logprobs[j + 1] = rows[j][prompt[begin + j + 1]];
  seq.stream->Push(std::move(event));
}

bool Engine::Impl::PrefillChunk() {
  const std::vector<Sequence*> group = scheduler_.PrefillGroup(active_);
  if (group.empty()) return false;
  const auto rows = static_cast<int64_t>(group.size());
  const int64_t begin = group[0]->prefilled;
  const int64_t count = scheduler_.ChunkLength(*group[0]);
  const absl::Time started = clock_.Now();
  try {
    std::vector<int64_t> tokens, slots;
    for (Sequence* seq : group) {
      const auto& prompt = seq->request.prompt;
      // Rows share a position in the state, not in their prompts (a start
      // state comes first).
      tokens.insert(tokens.end(), prompt.begin() + seq->prefilled,
                    prompt.begin() + seq->prefilled + count);
      slots.push_back(seq->slot);
    }
    // Scoring needs every position's logits; generation only the prompt's
    // last, and nothing from its earlier chunks.
    const bool scoring = group[0]->scoring();
    const bool last_chunk = std::any_of(group.begin(), group.end(), [&](const Sequence* seq) {
      return seq->prefilled + count == static_cast<int64_t>(seq->request.prompt.size());
    });
    const PrefillLogits wanted = scoring      ? PrefillLogits::kAll
                                 : last_chunk ? PrefillLogits::kLast
                                              : PrefillLogits::kNone;
    absl::StatusOr<torch::Tensor> logits = backend_->Prefill(
        torch::tensor(tokens, torch::dtype(torch::kLong)).view({rows, count}).to(device_),
        torch::tensor(slots, torch::dtype(torch::kLong)).to(device_), wanted);
    if (!logits.ok()) {
      for (Sequence* seq : group) EndWithError(*seq, logits.status());
      return true;
    }
    if (scoring) PushScores(*group[0], (*logits)[0], begin, count);
    if (logits->defined()) {
      torch::Tensor last =
          logits->select(1, logits->size(1) - 1).to(torch::kCPU, torch::kFloat).contiguous();
      for (int64_t i = 0; i < rows; ++i) group[i]->last_logits = RowToVector(last[i]);
    }
  } catch (const c10::Error& error) {  // copying the logits out
    for (Sequence* seq : group) {
      EndWithError(*seq, absl::InternalError(
                             absl::StrCat("prefill failed: ", error.what_without_backtrace())));
    }
    return true;
  }
  const absl::Duration took = clock_.Now() - started;
  NotePrefill(rows * count, took);
  observer_->OnStep(EngineObserver::Phase::kPrefill, took, rows, rows * count);
  for (Sequence* seq : group) {
    seq->prefilled += count;
    if (seq->prefilling() || seq->scoring()) SaveCheckpoint(*seq);
    if (seq->prefilling()) continue;
    if (seq->scoring()) {
      End(*seq, StreamEvent{});
    } else {
      // The checkpoint of the prompt's end copies the whole state (for a
      // hybrid, its key/value prefix: 74 MB at 3,000 tokens of LFM2-350M);
      // taken after the first token is out, it stays out of the time to it.
      seq->end_checkpoint_due = true;
      const auto& logits = seq->last_logits;
      Emit(*seq, seq->continuation->Sample(logits.data(), static_cast<int64_t>(logits.size())));
    }
  }
  // No decode step has run since: the rows still hold their prompts' ends.
  for (Sequence* seq : group) TakeDueCheckpoint(*seq);
  return true;
}

void Engine::Impl::TakeDueCheckpoint(Sequence& seq) {
  if (!seq.end_checkpoint_due) return;
  seq.end_checkpoint_due = false;
  if (seq.stream && seq.slot >= 0) SaveCheckpoint(seq);  // not after a failure's End
}

bool Engine::Impl::DecodeStep() {
  std::vector<Sequence*> batch = scheduler_.DecodeBatch(active_);
  if (batch.empty()) return false;
  ++decode_steps_;
  for (Sequence* seq : batch) seq->last_decoded = decode_steps_;
  // A small batch reads every weight for a token per row: checking a few
  // drafted tokens per row in one prefill reads them about once too. An
  // engine where nothing drafts skips the per-row questions.
  const bool drafts = (options_.speculative != Speculation::kOff || drafter_ != nullptr) &&
                      cheap_rollback_ &&
                      static_cast<int64_t>(batch.size()) <= options_.speculative_max_batch;
  if (drafts && Speculate(batch)) return true;
  PlainStep(batch);
  return true;
}

void Engine::Impl::PlainStep(const std::vector<Sequence*>& batch) {
  const auto rows = static_cast<int64_t>(batch.size());
  std::vector<int64_t> tokens(rows), slots(rows);
  for (int64_t i = 0; i < rows; ++i) {
    tokens[i] = batch[i]->next_token;
    slots[i] = batch[i]->slot;
  }
  const absl::Time started = clock_.Now();
  absl::StatusOr<torch::Tensor> stepped =
      backend_->Step(torch::tensor(tokens, torch::dtype(torch::kLong)),
                     torch::tensor(slots, torch::dtype(torch::kLong)));
  torch::Tensor logits;
  if (stepped.ok()) {
    try {
      logits = stepped->to(torch::kCPU, torch::kFloat).contiguous();
    } catch (const c10::Error& error) {
      stepped =
          absl::InternalError(absl::StrCat("decode step failed: ", error.what_without_backtrace()));
    }
  }
  if (!stepped.ok()) {
    for (Sequence* seq : batch) EndWithError(*seq, stepped.status());
    return;
  }
  const absl::Duration took = clock_.Now() - started;
  observer_->OnStep(EngineObserver::Phase::kDecode, took, rows, rows);
  NoteStep(rows, took);
  const int64_t vocab = logits.size(1);
  const float* data = logits.data_ptr<float>();
  // Each row has its own sampler, so the rows sample on all intra-op
  // threads (a few microseconds each at a 4k vocabulary, which the other
  // threads would otherwise spend waiting); the events go out in row order.
  std::vector<SampledToken> sampled(rows);
  at::parallel_for(0, rows, kRowsPerSamplingTask, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (!batch[i]->finishing)
        sampled[i] = batch[i]->continuation->Sample(data + i * vocab, vocab);
    }
  });
  for (int64_t i = 0; i < rows; ++i) {
    if (batch[i]->finishing) {  // its last token is in the state now
      batch[i]->last_fed = true;
      End(*batch[i], std::exchange(batch[i]->pending, StreamEvent()));
    } else {
      Emit(*batch[i], sampled[i]);
    }
  }
}

void Engine::Impl::Deliver(Sequence& seq, const SampledToken& token,
                           const AcceptedToken& accepted) {
  const absl::Time now = clock_.Now();
  ++seq.generated;
  seq.generated_ids.push_back(token.id);
  if (seq.generated == 1) {
    observer_->OnFirstToken(seq.request.protocol, now - seq.arrival);
  } else {
    observer_->OnNextToken(seq.request.protocol, now - seq.last_token);
  }
  seq.last_token = now;
  StreamEvent& event = seq.pending;
  event.token_ids.push_back(token.id);
  if (seq.request.logprobs) event.logprobs.push_back(static_cast<float>(token.logprob));
  if (!token.top.empty()) event.top_logprobs.push_back(token.top);
  if (seq.request.grammar) {
    observer_->OnGrammarMask(absl::Seconds(seq.continuation->TakeMaskSeconds()));
  }
  event.text += accepted.text;
  event.finish_reason = accepted.finish_reason;
  if (event.finish_reason == FinishReason::kUnspecified) {
    seq.next_token = token.id;
    // The first token goes out at once (time to first token); later ones
    // every stream_interval tokens.
    const auto due = static_cast<size_t>(std::max<int64_t>(1, options_.stream_interval));
    if (seq.generated == 1 || event.token_ids.size() >= due) {
      seq.stream->Push(std::exchange(seq.pending, StreamEvent()));
    }
    return;
  }
  if ((seq.request.return_state || seq.request.return_state_tokens) && CanFeedLast(seq)) {
    // One more decode step puts the last token into the state that goes
    // back to the client (or that the next turn continues from the cache);
    // it samples nothing.
    seq.next_token = token.id;
    seq.finishing = true;
    return;
  }
  End(seq, std::exchange(seq.pending, StreamEvent()));
}

void Engine::Impl::End(Sequence& seq, StreamEvent last) {
  if (last.status.ok() && !seq.scoring() && seq.slot >= 0) {
    TakeDueCheckpoint(seq);  // ended with its first token: the row holds the prompt's end
    if (absl::Status saved = SaveFinished(seq, last); !saved.ok()) {
      // The tokens stand; only the state asked for could not be copied.
      seq.pending = std::exchange(last, StreamEvent());
      last.status = saved;
    }
  }
  // A failure does not take back tokens already generated: they go first.
  if (!last.status.ok() && !seq.pending.token_ids.empty()) {
    seq.stream->Push(std::exchange(seq.pending, StreamEvent()));
  }
  last.last = true;
  if (last.status.ok()) {
    last.prompt_tokens = static_cast<int64_t>(seq.request.prompt.size());
    last.completion_tokens = seq.generated;
    last.cached_tokens = seq.request.start_tokens + seq.cache_hit;
    last.prefilled_tokens = last.prompt_tokens - seq.cache_hit;
  }
  if (seq.slot >= 0) {
    pool_.Release(seq.slot).IgnoreError();  // the slot is ours: cannot fail
    seq.slot = -1;
    reserved_ -= seq.reservation;
  }
  observer_->OnFinished(seq.request.protocol, last, clock_.Now() - seq.arrival);
  seq.stream->Push(std::move(last));
  seq.stream.reset();  // marks the sequence ended
  --unfinished_;
}

void Engine::Impl::RemoveEnded() {
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [](const std::unique_ptr<Sequence>& seq) { return !seq->stream; }),
                active_.end());
  free_slots_ = pool_.capacity() - pool_.in_use();
}

}  // namespace attn::serving
