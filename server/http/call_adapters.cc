#include "server/http/call_adapters.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "model/text/chat_template.h"
#include "server/core/model_registry.h"

namespace attn::serving::http {
namespace {

// Forwards a stream's wake-ups to its connection once the connection has
// given its waker: a stream may have events before the response starts.
class WakeRelay {
 public:
  void Wake() {
    Waker waker;
    {
      absl::MutexLock lock(&mu_);
      if (!waker_) {
        pending_ = true;
        return;
      }
      waker = waker_;
    }
    waker();
  }
  void Set(Waker waker) {
    bool pending = false;
    {
      absl::MutexLock lock(&mu_);
      waker_ = waker;
      pending = pending_;
    }
    if (pending) waker();
  }

 private:
  absl::Mutex mu_;
  Waker waker_ ABSL_GUARDED_BY(mu_);
  bool pending_ ABSL_GUARDED_BY(mu_) = false;
};

// A streamed response: the connection pulls its format's events whenever
// its last write is done, so the choices' bounded queues are the only
// buffer between the engine and a slow client. Its call's wakes only
// relay to the connection, so they run on the engine's thread.
class StreamingCall : public StreamSource {
 public:
  StreamingCall(std::unique_ptr<Call> call, std::unique_ptr<StreamFormat> format)
      : call_(std::move(call)), format_(std::move(format)) {}
  ~StreamingCall() override { call_->Detach(); }

  std::string Pull(bool* done) override {
    std::string out;
    if (call_->outcome()) {  // cancelled
      *done = true;
      return out;
    }
    if (!begun_) {
      begun_ = true;
      out += format_->Begin();
    }
    std::vector<ChoiceEvent> events;
    absl::Status popped = call_->Pop(&events);
    for (const ChoiceEvent& e : events) out += format_->Event(e.choice, e.event);
    if (!popped.ok()) {
      // A choice failed after the response began: the error, then the
      // end; the other choices stop.
      out += format_->Failed(popped);
      call_->Finish(popped);
    } else if (call_->AllDone()) {
      out += format_->Done();
      call_->Finish(absl::OkStatus());
    }
    *done = call_->outcome().has_value();
    return out;
  }

  void Cancel() override { call_->Cancel(); }

 private:
  const std::unique_ptr<Call> call_;
  const std::unique_ptr<StreamFormat> format_;
  bool begun_ = false;
};

}  // namespace

RequestTarget TargetOf(const HostedModel& model) {
  RequestTarget target;
  target.tokenizer = model.tokenizer.get();
  target.limits = model.engine->options().limits;
  ParseChatFormat(model.description.chat_format, &target.chat_format);
  target.chat_template = model.chat_template.get();
  target.chat_stop_ids = model.chat_stop_ids;
  target.state = {model.description.name, model.description.fingerprint,
                  model.engine->state_budget_bytes()};
  target.initial_states = &model.initial_states;
  target.tool_call_format = ToolCallFormatOf(model);
  return target;
}

ToolCallFormat ToolCallFormatOf(const HostedModel& model) {
  if (model.chat_template == nullptr) return ToolCallFormat::kHermes;
  ToolCallFormat format = ToolCallFormat::kNone;
  ParseToolCallFormat(model.chat_template->tool_call_format(), &format);
  return format;
}

absl::Time DeadlineOf(const HttpRequest& request, absl::Duration timeout) {
  int64_t seconds = 0;
  if (absl::SimpleAtoi(request.Header("x-stainless-timeout"), &seconds) && seconds > 0) {
    timeout = std::min(timeout, absl::Seconds(seconds));
  }
  return timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
}

void StreamCall(std::unique_ptr<Call> call, const std::shared_ptr<Reply>& reply,
                const StartCall& start,
                const std::function<std::unique_ptr<StreamFormat>()>& format) {
  auto relay = std::make_shared<WakeRelay>();
  absl::Status started = start(*call, [relay] { relay->Wake(); });
  if (!started.ok()) return reply->Send(ErrorReply(started));
  auto source = std::make_shared<StreamingCall>(std::move(call), format());
  relay->Set(reply->Stream(200, "text/event-stream", std::move(source)));
}

absl::Status CollectingCall::Start(const std::string& authorization, const std::string& model,
                                   const Call::Convert& convert, Answer answer) {
  answer_ = std::move(answer);
  // A client that hangs up before the answer frees its choices' slots.
  reply_->OnHangUp([weak = weak_from_this()] {
    if (auto call = weak.lock()) call->HangUp();
  });
  absl::Status started =
      call_.Start(authorization, model, convert, [self = shared_from_this()] { self->Collect(); });
  if (!started.ok()) call_.Release();
  return started;
}

void CollectingCall::Collect() {
  absl::MutexLock lock(&mu_);
  if (call_.outcome()) return;
  std::vector<ChoiceEvent> events;
  absl::Status popped = call_.Pop(&events);
  if (logs_.size() < static_cast<size_t>(call_.choices())) logs_.resize(call_.choices());
  for (const ChoiceEvent& e : events) {
    if (static_cast<size_t>(e.choice) >= logs_.size()) logs_.resize(e.choice + 1);
    logs_[e.choice].Add(e.event);
  }
  if (!popped.ok()) return FinishLocked(popped);
  if (call_.AllDone()) FinishLocked(absl::OkStatus());
}

void CollectingCall::HangUp() {
  absl::MutexLock lock(&mu_);
  call_.Cancel();
  // The wakes hold this call through its streams; let them go.
  call_.Release();
}

void CollectingCall::FinishLocked(const absl::Status& status) {
  const bool first = call_.Finish(status);
  call_.Release();
  if (first) reply_->Send(status.ok() ? JsonReply(200, answer_(logs_)) : ErrorReply(status));
}

}  // namespace attn::serving::http
