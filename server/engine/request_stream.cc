#include "server/engine/request_stream.h"

#include <utility>

#include "server/engine/delivery_thread.h"

namespace attn::serving {

RequestStream::RequestStream(size_t capacity, DeliveryThread* delivery)
    : capacity_(capacity < 1 ? 1 : capacity), delivery_(delivery) {}

void RequestStream::SetListener(std::function<void()> on_event) {
  absl::MutexLock lock(&listener_mu_);
  listener_ = std::move(on_event);
}

void RequestStream::ClearListener() {
  absl::MutexLock lock(&listener_mu_);
  listener_ = nullptr;
}

std::vector<StreamEvent> RequestStream::PopReady() {
  WakeFn wake;
  bool deliver_again = false;
  std::vector<StreamEvent> taken;
  {
    absl::MutexLock lock(&mu_);
    const bool was_full = events_.size() >= capacity_;
    while (!events_.empty()) {
      if (!taken.empty() && !events_.front().status.ok()) break;
      taken.push_back(std::move(events_.front()));
      events_.pop_front();
      if (taken.back().last) break;
    }
    if (was_full && !taken.empty()) wake = wake_;
    // A failure left queued behind the events taken may have been pushed
    // while this listener call was already due, so no call is coming for
    // it: schedule one, or a reader that pops once per call (a whole
    // response's) would wait for it for ever.
    if (!taken.empty() && !events_.empty() && delivery_ != nullptr && !delivery_scheduled_) {
      delivery_scheduled_ = true;
      deliver_again = true;
    }
  }
  if (wake) wake();  // the engine may resume this sequence
  if (deliver_again) delivery_->Schedule(shared_from_this());
  return taken;
}

void RequestStream::Cancel() {
  WakeFn wake;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    wake = wake_;
  }
  if (wake) wake();  // free the slot now, not at the next unrelated step
}

bool RequestStream::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

bool RequestStream::full() const {
  absl::MutexLock lock(&mu_);
  return events_.size() >= capacity_;
}

void RequestStream::Push(StreamEvent event) {
  bool schedule = false;
  {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(event));
    schedule = delivery_ != nullptr && !delivery_scheduled_;
    if (schedule) delivery_scheduled_ = true;
  }
  if (delivery_ == nullptr) {
    RunListener();
  } else if (schedule) {
    delivery_->Schedule(shared_from_this());
  }
}

void RequestStream::RunListener() {
  {
    // Cleared before the call: an event pushed while the listener runs
    // schedules another call instead of being missed.
    absl::MutexLock lock(&mu_);
    delivery_scheduled_ = false;
  }
  absl::MutexLock lock(&listener_mu_);
  if (listener_) listener_();
}

void RequestStream::SetWake(WakeFn wake) {
  absl::MutexLock lock(&mu_);
  wake_ = std::move(wake);
}

}  // namespace attn::serving
