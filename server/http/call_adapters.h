// What the HTTP endpoints that generate share: a Call (server/core/call.h)
// answered as one JSON body once every choice is done (CollectingCall), or
// as a stream the connection pulls (StreamingCall) in an endpoint's own
// event format (StreamFormat), and what converting a request needs of its
// model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "model/text/tool_calls.h"
#include "server/core/call.h"
#include "server/http/http_server.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"

namespace attn::serving::http {

// What converting a request needs of `model`.
RequestTarget TargetOf(const HostedModel& model);

// The format a model's replies write tool calls in: its template's, or
// Hermes-style for the built-in chat formats (HermesToolTurns).
ToolCallFormat ToolCallFormatOf(const HostedModel& model);

// When a request must be done: `timeout` from now, or sooner when the
// client says how long it waits (OpenAI's clients send X-Stainless-Timeout,
// in seconds).
absl::Time DeadlineOf(const HttpRequest& request, absl::Duration timeout);

// An endpoint's stream: the bytes for each choice's events, for a failure
// after the stream began, and for its end. Called on the connection's I/O
// thread, one call at a time.
class StreamFormat {
 public:
  virtual ~StreamFormat() = default;
  // Before the first event (an opening event; may be empty).
  virtual std::string Begin() { return ""; }
  virtual std::string Event(int64_t choice, const StreamEvent& event) = 0;
  // A choice failed: the error, and the stream's end.
  virtual std::string Failed(const absl::Status& status) = 0;
  // Every choice is done.
  virtual std::string Done() = 0;
};

// Starts `call` through `start` (which gives Call::Start `wake`, on the
// engine thread) and streams it as `reply` in the format `format` makes
// once it started; the answer is the refusal when it does not start.
using StartCall = std::function<absl::Status(Call& call, std::function<void()> wake)>;
void StreamCall(std::unique_ptr<Call> call, const std::shared_ptr<Reply>& reply,
                const StartCall& start,
                const std::function<std::unique_ptr<StreamFormat>()>& format);

// A whole response: gathers every choice's events on the delivery thread
// and answers once all are done, with `answer`'s body (200) of the choices'
// logs. Its call's wakes hold it until then.
class CollectingCall : public std::enable_shared_from_this<CollectingCall> {
 public:
  using Answer = std::function<nlohmann::ordered_json(const std::vector<ChoiceLog>&)>;
  CollectingCall(const CallCore& core, const char* method, std::shared_ptr<Reply> reply)
      : call_(core, method, Protocol::kHttp), reply_(std::move(reply)) {}

  // Starts the call; `convert` also sets what `answer` needs (it runs
  // before any event can come). The refusal is returned, not sent.
  absl::Status Start(const std::string& authorization, const std::string& model,
                     const Call::Convert& convert, Answer answer);

 private:
  void Collect();
  void HangUp();
  void FinishLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  Call call_;
  const std::shared_ptr<Reply> reply_;
  Answer answer_;
  std::vector<ChoiceLog> logs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace attn::serving::http
