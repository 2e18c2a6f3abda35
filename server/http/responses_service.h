// OpenAI's Responses API (docs/openai.md, "Responses"):
//
//   POST   /v1/responses        a turn; with stream: the Responses events
//   GET    /v1/responses/{id}   a stored response
//   DELETE /v1/responses/{id}
//
// A turn runs as a Call of the server's CallCore, as Chat Completions'
// do (the same keys, limits, queue and metrics, method "Responses"). A
// stored response (store, the default) keeps the conversation it ends in
// (server/state/response_store.h), so that a turn naming it as
// previous_response_id renders the whole conversation and prefills only its
// new input from the state after the previous reply (responses_request.h).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "server/core/call.h"
#include "server/http/http_server.h"
#include "server/http/responses_request.h"

namespace attn::serving {
class ResponseStore;
}  // namespace attn::serving

namespace attn::serving::http {

class ResponsesService {
 public:
  // `core` and `store` must outlive the service. A turn must be done within
  // `timeout`, or sooner when its client says so (DeadlineOf).
  ResponsesService(const CallCore& core, ResponseStore& store, absl::Duration timeout);

  void AddRoutes(HttpServer& server);

 private:
  void Create(const HttpRequest& request, std::shared_ptr<Reply> reply);
  void Retrieve(const HttpRequest& request, std::shared_ptr<Reply> reply);
  void Remove(const HttpRequest& request, std::shared_ptr<Reply> reply);
  // Runs the turn of `r` after `previous` (none: a new conversation).
  void Run(const ResponsesRequest& r, std::optional<Conversation> previous,
           const std::string& authorization, absl::Time deadline,
           const std::shared_ptr<Reply>& reply);
  // The id after /v1/responses/ once the caller is known; empty after
  // refusing.
  std::string IdOf(const HttpRequest& request, const std::shared_ptr<Reply>& reply,
                   const char* method);
  void Refuse(const std::shared_ptr<Reply>& reply, const char* method, const absl::Status& status);

  const CallCore& core_;
  ResponseStore& store_;
  const absl::Duration timeout_;
};

}  // namespace attn::serving::http
