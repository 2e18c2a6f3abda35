// The Responses API's answers, built from the engine's events: the
// response object (whole, and as GET /v1/responses/{id} returns it), its
// output items (a message, function calls), and the stream's server-sent
// events: response.created, response.in_progress, then per item
// response.output_item.added, response.content_part.added,
// response.output_text.delta ... done (a message) or
// response.function_call_arguments.delta and .done (a call),
// response.output_item.done, and last response.completed (or an error
// event).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "model/text/chat_format.h"
#include "model/text/tool_calls.h"
#include "server/engine/request_stream.h"
#include "server/http/call_adapters.h"
#include "server/http/json_fields.h"
#include "server/http/responses_request.h"

namespace attn::serving::http {

// One response's identity and the request's fields it echoes.
struct ResponsesContext {
  std::string id;  // "resp_..."
  int64_t created = 0;
  std::string model;
  Json echo;  // instructions, tools, temperature, ... as the response shows them
  // The format tool calls are read in (kNone: tools absent or
  // tool_choice "none"), and whether more than one goes back.
  ToolCallFormat tool_calls = ToolCallFormat::kNone;
  bool parallel_tool_calls = true;
};
ResponsesContext NewResponsesContext(const ResponsesRequest& request, const std::string& model,
                                     ToolCallFormat model_format);

// A random id with `prefix` ("resp_", "msg_", "fc_", "call_").
std::string NewItemId(const char* prefix);

// The output items of a whole reply: a message with its text (unless the
// reply is only tool calls), then a function_call item per call.
Json OutputItems(const ResponsesContext& context, const std::string& text);

// The reply as an assistant chat message, for the conversation a later
// turn continues: its messages' text, its function calls as tool calls.
ChatMessage ReplyMessage(const Json& output);

// The response object: status "in_progress" without `last`; after it
// "completed", or "incomplete" (incomplete_details.reason
// "max_output_tokens") when the reply ran out of tokens; usage from
// `last` (input_tokens_details.cached_tokens: the context not prefilled).
Json ResponseObject(const ResponsesContext& context, const Json& output, const StreamEvent* last);

// What a finished reply leaves: called once with the response object, the
// last event and the reply as a chat message.
using OnResponse =
    std::function<void(const Json& response, const StreamEvent& last, ChatMessage reply)>;

// The stream's events for one reply (the Responses API has one choice).
class ResponsesEvents : public StreamFormat {
 public:
  ResponsesEvents(ResponsesContext context, OnResponse on_response);
  std::string Begin() override;
  std::string Event(int64_t choice, const StreamEvent& event) override;
  std::string Failed(const absl::Status& status) override;
  std::string Done() override;

 private:
  std::string Emit(const std::string& type, Json data);
  void Text(const std::string& delta, std::string* out);
  void CloseMessage(std::string* out);
  void Call(const ToolCall& call, std::string* out);

  const ResponsesContext context_;
  const OnResponse on_response_;
  std::unique_ptr<ToolCallStream> tool_stream_;
  int64_t sequence_ = 0;
  Json output_ = Json::array();
  int64_t calls_ = 0;
  // The message item being written: its index in output_ (-1: none).
  int64_t open_message_ = -1;
  std::string message_text_;
  std::string held_;  // blank text no message has taken yet
  StreamEvent last_;
};

}  // namespace attn::serving::http
