#include "server/engine/delivery_thread.h"

#include <pthread.h>

#include <utility>

#include "server/engine/request_stream.h"

namespace attn::serving {

DeliveryThread::DeliveryThread()
    : thread_([this] {
        pthread_setname_np(pthread_self(), "attn-delivery");
        Loop();
      }) {}

DeliveryThread::~DeliveryThread() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.Signal();
  thread_.join();
}

void DeliveryThread::Schedule(std::shared_ptr<RequestStream> stream) {
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    scheduled_.push_back(std::move(stream));
    wake = sleeping_;
    sleeping_ = false;  // one wake-up per sleep, not one per event
  }
  if (wake) cv_.Signal();
}

void DeliveryThread::Loop() {
  std::vector<std::shared_ptr<RequestStream>> batch;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      while (scheduled_.empty() && !stopping_) {
        sleeping_ = true;
        cv_.Wait(&mu_);
      }
      sleeping_ = false;
      if (scheduled_.empty()) return;  // stopping, and nothing left to run
      batch.swap(scheduled_);
    }
    for (auto& stream : batch) stream->RunListener();
    batch.clear();  // may free streams whose RPC and request both ended
  }
}

}  // namespace attn::serving
