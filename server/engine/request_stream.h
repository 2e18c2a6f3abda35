// What the engine hands back for one request, and the bounded queue that
// carries it from the engine thread to the RPC that reads it.
//
// The queue is the backpressure point: the engine skips a sequence whose
// queue is full (it keeps its state slot and resumes when the reader catches
// up), so a slow reader costs one state slot and `capacity` events, never
// unbounded memory.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "model/lm/finish_reason.h"

namespace attn {
struct SavedRow;  // model/backend/backend.h
}  // namespace attn

namespace attn::serving {

struct StreamEvent {
  std::string text;                // new text (whole UTF-8 characters)
  std::vector<int64_t> token_ids;  // new tokens
  std::vector<float> logprobs;     // one per token when asked for (always for scoring)
  // Per token, when the request asked for top_logprobs: the most likely
  // tokens and their log-probabilities (SampledToken::top).
  std::vector<std::vector<std::pair<int64_t, float>>> top_logprobs;
  // The last event of a request: finish reason and usage, or an error.
  bool last = false;
  absl::Status status;  // non-OK: the request failed (last is true)
  FinishReason finish_reason = FinishReason::kUnspecified;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  // Of the context, tokens this request did not prefill: a state cache
  // hit's, or those of the state it started from. prefilled_tokens: the
  // prompt tokens it ran through the model.
  int64_t cached_tokens = 0;
  int64_t prefilled_tokens = 0;
  // EngineRequest::return_state, on the last event of a success: the state
  // after `state_tokens` tokens in all (a start state's included), of which
  // `state_token_ids` are this request's (its prompt, then what it
  // generated; the last generated token only if the context had room).
  std::shared_ptr<const SavedRow> state;
  int64_t state_tokens = 0;
  std::vector<int64_t> state_token_ids;
};

class DeliveryThread;

// Wakes whoever waits for space: the engine, when a full queue drains.
using WakeFn = std::function<void()>;

class RequestStream : public std::enable_shared_from_this<RequestStream> {
 public:
  // Without a DeliveryThread the listener runs on the thread that pushes;
  // with one (it must outlive the stream's last Push), it runs there, and
  // the stream must be owned by a shared_ptr.
  explicit RequestStream(size_t capacity, DeliveryThread* delivery = nullptr);

  // --- Reader side (the RPC) ---
  // Called after Push, on the pushing thread or the DeliveryThread (once
  // for several events when they queue meanwhile); may call PopReady.
  // ClearListener returns once no call is running and none will start.
  void SetListener(std::function<void()> on_event);
  void ClearListener();
  // Every queued event up to and including the first failure or last event,
  // except that a failure behind successful events stays queued for the next
  // call: so a writer can send the successes as one message, then fail. With
  // a delivery thread, the listener is called again for what stays queued.
  std::vector<StreamEvent> PopReady();
  // The reader is gone (cancelled, disconnected): the engine frees the slot
  // at its next step and pushes nothing more.
  void Cancel();

  // --- Engine side ---
  bool cancelled() const;
  // A full queue pauses the sequence. The last event is always accepted.
  bool full() const;
  void Push(StreamEvent event);
  void SetWake(WakeFn wake);

 private:
  friend class DeliveryThread;
  void RunListener();

  const size_t capacity_;
  DeliveryThread* const delivery_;
  mutable absl::Mutex mu_;
  std::deque<StreamEvent> events_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool delivery_scheduled_ ABSL_GUARDED_BY(mu_) = false;
  WakeFn wake_ ABSL_GUARDED_BY(mu_);
  // Held while the listener runs, so that ClearListener() waits for a
  // running call. The listener takes mu_ (PopReady) under it, never the
  // other way round.
  absl::Mutex listener_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::function<void()> listener_ ABSL_GUARDED_BY(listener_mu_);
};

}  // namespace attn::serving
