// OpenAI's Responses API requests (POST /v1/responses; docs/openai.md lists
// every field), and the conversation a stored response ends in, which a
// later turn's previous_response_id continues.
//
// A turn's prompt is the whole conversation rendered by the model's chat
// template (or chat format): the instructions as its system turn, every
// earlier turn, the new input. When the model's previous reply left its
// state after tokens whose text that rendering starts with, the prompt is
// those tokens and then only the new text's: the state cache (or the
// shared tier) holds the state after them, so the turn prefills only its
// new input, however long the conversation. A rendering that rewrites the
// history (other instructions, other tools, a template that drops earlier
// reasoning) is prefilled from the longest prefix the cache has.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "model/text/chat_format.h"
#include "server/engine/engine.h"
#include "server/http/json_fields.h"
#include "server/http/openai_request.h"

namespace attn::serving::http {

struct ResponsesRequest {
  std::string model;
  // The turn's input items as chat messages: a string is one user message;
  // function_call items are assistant tool calls, function_call_output
  // items tool messages.
  std::vector<ChatMessage> input;
  std::optional<std::string> instructions;
  std::string previous_response_id;
  std::optional<int64_t> max_output_tokens;
  double temperature = 1.0;
  double top_p = 1.0;
  // Function tools: as the Responses API writes them (echoed in the
  // response), and as Chat Completions does (for the chat template); both
  // empty for none.
  Json tools = Json::array();
  std::string tools_json;
  ToolChoice tool_choice;
  bool parallel_tool_calls = true;
  // text.format: structured output, as Chat Completions' response_format
  // (flat: name and schema beside "type"); inactive for text.
  RequestConstraint constraint;
  Json text_format = Json{{"type", "text"}};  // as the response echoes it
  bool stream = false;
  bool store = true;
  Json metadata = Json::object();
  std::string user;
  bool ignore_eos = false;  // attn_ignore_eos, as Chat Completions'
};

// Parses a body: kInvalidArgument naming the field, as Chat Completions'
// parser does; fields the API has that this server does not implement
// (include, reasoning, background, a text format other than text, ...)
// are refused by name.
absl::StatusOr<ResponsesRequest> ParseResponsesRequest(absl::string_view body);

// The conversation a response ends in.
struct Conversation {
  std::string model;
  std::string fingerprint;  // the model's: tokens are only of the same model
  std::optional<std::string> instructions;
  std::string tools_json;             // the tools the turns were rendered with
  std::vector<ChatMessage> messages;  // every turn, without the instructions
  // The tokens the model's state holds at the end of its last reply, and
  // their text (the rendered prompt, then the reply's tokens as fed).
  std::vector<int64_t> tokens;
  std::string text;

  Json ToJson() const;
  // kInvalidArgument naming the field of a record that does not parse.
  static absl::StatusOr<Conversation> FromJson(const Json& json);
};

// One turn: its engine request, and the conversation up to the model's
// reply (messages and the prompt's tokens and text).
struct ResponsesTurn {
  EngineRequest request;
  Conversation conversation;
};

// The turn of `request` after `previous` (null: a new conversation) on
// `target`, checked as every generation request is. The new input's tokens
// count against max_prompt_tokens; the earlier turns' against the context.
absl::StatusOr<ResponsesTurn> ToResponsesTurn(const ResponsesRequest& request,
                                              const Conversation* previous,
                                              const RequestTarget& target, const std::string& model,
                                              const std::string& fingerprint, absl::Time deadline);

// The conversation after the model's reply: `reply` (an assistant message)
// appended, and the state's tokens (the engine's state_token_ids) with
// their text.
void EndTurn(const Tokenizer& tokenizer, ChatMessage reply,
             const std::vector<int64_t>& state_tokens, Conversation* conversation);

}  // namespace attn::serving::http
