// OpenAI's Completions and Chat Completions requests (docs/openai.md lists
// every field): the JSON body parsed and checked field by field, then made
// into the engine's requests for a model, through the same checks as every
// protocol (server/core/validation.h). A field the API does not know, or one it
// knows but this server does not implement (echo, suffix, best_of above
// 1), is refused by name, never ignored. Errors are kInvalidArgument in util/field_error.h's
// format, "field: what is wrong", so the HTTP layer can name the field (the error object's
// `param`).
//
// Extensions, named attn_* so they never clash with OpenAI's:
//   attn_return_state   bool: each choice's last chunk (or the choice in
//                       the response) carries its sequence's state,
//                       attn_state;
//   attn_state          {"data": base64 of a state blob, "reply_stopped":
//                       bool} as a response returned it: the request
//                       continues that sequence, and `messages` (chat) or
//                       `prompt` (completions) holds only what is new;
//   attn_initial_state  the name of one of the model's initial states;
//   attn_ignore_eos     bool: generate max_tokens tokens whatever the model
//                       predicts (gRPC's ignore_eos; benchmarks use it);
//   attn_response_format  completions: chat's response_format;
//   attn_structured     {"regex"}, {"choice"} or {"grammar"} (GBNF): output
//                       constrained as JSON Schema cannot say.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/text/chat_format.h"
#include "model/text/tool_calls.h"
#include "server/core/structured.h"
#include "server/core/validation.h"
#include "server/engine/engine.h"
#include "server/http/json_fields.h"
#include "server/state/initial_states.h"

namespace attn {
class ChatTemplate;
class Tokenizer;
}  // namespace attn

namespace attn::serving::http {

enum class ApiKind { kCompletions, kChat };

// A tool_choice: "none", "auto", "required", or a named function in Chat
// Completions' form {"type": "function", "function": {"name"}} or the
// Responses API's {"type": "function", "name"}.
struct ToolChoice {
  bool none = false;
  bool required = false;         // "required", or a named function
  std::string function;          // the named function
  Json ToResponsesJson() const;  // as the Responses API echoes it
};
absl::StatusOr<ToolChoice> ParseToolChoice(const Json& choice);

// The fields of a request, parsed and range-checked; what needs a model
// (tokens, context, stop counts) is checked by ToEngineRequests.
struct OpenAiRequest {
  ApiKind kind = ApiKind::kCompletions;
  std::string model;
  // Completions: a prompt's text, or its token ids.
  std::optional<std::string> prompt_text;
  std::vector<int64_t> prompt_ids;
  // Chat.
  std::vector<ChatMessage> messages;
  std::optional<int64_t> max_tokens;
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t n = 1;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Log-probabilities: completions' `logprobs` (that many alternatives,
  // 0 for the chosen token's alone), chat's `logprobs` and `top_logprobs`.
  bool logprobs = false;
  int64_t top_logprobs = 0;
  std::optional<uint64_t> seed;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  std::vector<std::pair<int64_t, float>> logit_bias;
  std::string user;
  // Tool calling (chat): the tools as a JSON array's text ("" for none),
  // tool_choice (none: tools shown, calls not read; required or a named
  // function: the reply is forced to be calls), and parallel_tool_calls
  // (false: the first call only).
  std::string tools_json;
  ToolChoice tool_choice;
  bool parallel_tool_calls = true;
  // Structured output: response_format (chat), attn_response_format
  // (completions) or attn_structured; inactive for free text.
  RequestConstraint constraint;
  // Extensions.
  bool return_state = false;
  std::optional<std::string> state;  // the blob's bytes
  bool state_reply_stopped = true;
  std::string initial_state;
  bool ignore_eos = false;
};

// The most choices one request may ask for (`n`).
inline constexpr int64_t kMaxChoices = 16;

// Parses a request body. kInvalidArgument naming the field (or the JSON
// position of a syntax error: "body: invalid JSON at byte 17").
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(ApiKind kind, absl::string_view body);

// What converting a request needs of the model it runs on.
struct RequestTarget {
  const Tokenizer* tokenizer = nullptr;
  RequestLimits limits;
  ChatFormat chat_format = ChatFormat::kPlain;
  // The model's chat template, which renders chats instead of chat_format
  // (null: none), and the ids that end its replies (HostedModel).
  const ChatTemplate* chat_template = nullptr;
  std::vector<int64_t> chat_stop_ids;
  ToolCallFormat tool_call_format = ToolCallFormat::kHermes;  // how its replies call tools
  StateTarget state;                                          // which states it accepts
  const InitialStates* initial_states = nullptr;              // by name; may be null
};

// The engine requests of `request` on `target`, one per choice (`n`), each
// checked as gRPC's are: the prompt (a chat's messages in the model's chat
// format, its stops added), the limits, the state or initial state. Seeds:
// `seed` + choice, or random.
absl::StatusOr<std::vector<EngineRequest>> ToEngineRequests(const OpenAiRequest& request,
                                                            const RequestTarget& target,
                                                            absl::Time deadline);

// One chat message as Chat Completions takes it ({"role", "content": a
// string or text parts, "tool_calls", "tool_call_id", "name", ...}), its
// errors naming `field`; the Responses API's items become such messages.
absl::StatusOr<ChatMessage> ParseChatMessage(const Json& message, const std::string& field);

// A message's content: a string, or a list of text parts whose `type` is
// one of `types` ({"type": "text", "text"}); other parts are refused by
// name.
absl::StatusOr<std::string> TextContent(const Json& content, const std::string& field,
                                        std::initializer_list<const char*> types);

// POST /tokenize (as vLLM names it): {"model", "prompt"} or {"model",
// "messages", "add_generation_prompt", "tools"}, each with
// "add_special_tokens" (default true for a prompt, false for messages).
struct TokenizeRequest {
  std::string model;
  TokenizeInput input;
};
absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(absl::string_view body);

// POST /detokenize: {"model", "tokens"}.
struct DetokenizeRequest {
  std::string model;
  std::vector<int64_t> tokens;
};
absl::StatusOr<DetokenizeRequest> ParseDetokenizeRequest(absl::string_view body);

}  // namespace attn::serving::http
