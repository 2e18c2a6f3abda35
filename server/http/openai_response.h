// OpenAI's response objects, built from the engine's events: a whole
// text_completion or chat.completion, the chunks of a stream, usage, and
// the error object with its HTTP status. The one place HTTP answers are
// made of statuses.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "attn/v1/text_generation.pb.h"
#include "model/text/tool_calls.h"
#include "nlohmann/json.hpp"
#include "server/engine/request_stream.h"
#include "server/http/http_server.h"
#include "server/http/openai_request.h"

namespace attn {
class Tokenizer;
}  // namespace attn

namespace attn::serving::http {

// The HTTP status and OpenAI error object of a refusal:
//   400 invalid_request_error (INVALID_ARGUMENT, FAILED_PRECONDITION,
//       OUT_OF_RANGE), 401 authentication_error, 404 not_found_error,
//   413 (the HTTP layer's), 429 rate_limit_error (RESOURCE_EXHAUSTED),
//   503 server_unavailable (UNAVAILABLE), 504 timeout (DEADLINE_EXCEEDED),
//   500 server_error otherwise.
// `param` is the field the status carries (util/field_error.h).
int HttpStatusOf(absl::StatusCode code);
nlohmann::ordered_json ErrorObject(const absl::Status& status);
// The one place a status becomes an HTTP answer: its status and error object.
HttpResponse ErrorReply(const absl::Status& status);
// A JSON answer (text that is not UTF-8 becomes U+FFFD).
HttpResponse JsonReply(int status, const nlohmann::ordered_json& body);

// A model object of /v1/models: its id, and under "attn" every field that
// ListModels sets (CallCore::Describe), by the proto's names.
nlohmann::ordered_json ModelObject(const attn::v1::ModelInfo& info, int64_t created);

// What one choice (one engine request) produced so far.
struct ChoiceLog {
  std::string text;
  std::vector<int64_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<int64_t, float>>> top;
  bool done = false;
  StreamEvent last;  // the final event: finish reason, usage, state
  // Streaming: whether a chunk went out, and the text's bytes so far.
  bool started = false;
  int64_t text_bytes = 0;
  // Streaming with tool calls: the reply's reader and the calls sent.
  std::shared_ptr<ToolCallStream> tool_stream;
  int64_t calls_sent = 0;
  void Add(const StreamEvent& event);
};

// Identity of one response: "cmpl-..." or "chatcmpl-...", its creation
// time, the model, and what the choices' logprobs need.
struct ResponseContext {
  ApiKind kind = ApiKind::kCompletions;
  std::string id;
  int64_t created = 0;
  std::string model;
  std::string fingerprint;  // the model's, for attn_state
  const Tokenizer* tokenizer = nullptr;
  bool logprobs = false;
  bool include_usage = false;
  // A chat with tools whose tool_choice is not "none": the format its
  // replies' tool calls are read in (kNone: not read), and whether more
  // than one call per reply goes back (parallel_tool_calls).
  ToolCallFormat tool_calls = ToolCallFormat::kNone;
  bool parallel_tool_calls = true;
};
ResponseContext NewResponseContext(ApiKind kind, const std::string& model,
                                   const std::string& fingerprint, const Tokenizer& tokenizer,
                                   bool logprobs, bool include_usage);

// Whether a reply's text is only whitespace: no message of its own beside
// its tool calls.
bool Blank(const std::string& text);

// The whole response once every choice is done.
nlohmann::ordered_json CompletionResponse(const ResponseContext& context,
                                          const std::vector<ChoiceLog>& choices);

// One stream chunk carrying `event` for choice `index`: the role first
// (chat), text deltas, the finish reason; `text_offset` is where the
// choice's text stood before it (completions' logprobs).
nlohmann::ordered_json StreamChunk(const ResponseContext& context, int64_t index,
                                   const StreamEvent& event, bool first, int64_t text_offset);

// The chunks of a streamed chat choice when its tool calls are read: the
// event's text up to where a call may begin, each completed call as two
// OpenAI tool-call deltas (its id, type and name, then its arguments), and
// with the last event the finish reason, "tool_calls" when calls went out
// (on the last chunk).
std::vector<nlohmann::ordered_json> ToolCallChunks(const ResponseContext& context, int64_t index,
                                                   const StreamEvent& event, ChoiceLog* log);
// The last chunk when include_usage: no choices, the usage of all of them.
nlohmann::ordered_json UsageChunk(const ResponseContext& context,
                                  const std::vector<ChoiceLog>& choices);
// "data: <json>\n\n", and the stream's end, "data: [DONE]\n\n".
std::string ServerSentEvent(const nlohmann::ordered_json& data);
inline constexpr char kStreamDone[] = "data: [DONE]\n\n";

// The attn_state extension of a choice that returned its state; null
// otherwise.
nlohmann::ordered_json StateExtension(const ResponseContext& context, const ChoiceLog& choice);

}  // namespace attn::serving::http
