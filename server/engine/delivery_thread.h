// A thread that runs RequestStream listeners, so that the thread pushing
// events (a model's engine) never serialises responses or writes to sockets.
//
// Under load a listener's gRPC write costs tens of microseconds (framing and
// a sendmsg on the caller's thread); run inline, 64 of them after every
// decode step added a quarter to each iteration. Handing the stream to this
// thread costs the engine one short critical section per event.
#pragma once
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace attn::serving {

class RequestStream;

class DeliveryThread {
 public:
  DeliveryThread();
  // Runs what is still scheduled, then joins.
  ~DeliveryThread();
  DeliveryThread(const DeliveryThread&) = delete;
  DeliveryThread& operator=(const DeliveryThread&) = delete;

  // Runs the stream's listener on this thread soon. A stream is scheduled at
  // most once at a time (RequestStream keeps track), so a burst of events
  // costs one listener call.
  void Schedule(std::shared_ptr<RequestStream> stream);

 private:
  void Loop();

  absl::Mutex mu_;
  absl::CondVar cv_;  // signalled when work arrives for a sleeping Loop()
  std::vector<std::shared_ptr<RequestStream>> scheduled_ ABSL_GUARDED_BY(mu_);
  bool sleeping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the fields above exist
};

}  // namespace attn::serving
