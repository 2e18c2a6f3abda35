#include "server/http/openai_response.h"

#include <random>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "model/text/tokenizer.h"
#include "server/state/state_blob.h"
#include "util/field_error.h"
#include "util/utf8.h"

namespace attn::serving::http {
namespace {

using Json = nlohmann::ordered_json;

std::string FinishName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
    case FinishReason::kEos:
      return "stop";
    case FinishReason::kUnspecified:
      break;
  }
  return "";
}

// A token's text as JSON can hold it: its bytes, with a piece of a
// character shown as U+FFFD (its `bytes` say which).
std::string TokenText(const Tokenizer& tokenizer, int64_t id) {
  const std::string bytes = tokenizer.TokenBytes(id);
  return IsValidUtf8(bytes) ? bytes : "\xef\xbf\xbd";
}

Json TokenBytes(const Tokenizer& tokenizer, int64_t id) {
  Json bytes = Json::array();
  for (unsigned char b : tokenizer.TokenBytes(id)) bytes.push_back(static_cast<int>(b));
  return bytes;
}

// Completions' logprobs object for tokens [from, to) of a choice.
Json CompletionLogprobs(const ResponseContext& c, const std::vector<int64_t>& tokens,
                        const std::vector<float>& logprobs,
                        const std::vector<std::vector<std::pair<int64_t, float>>>& top,
                        int64_t text_offset) {
  Json out = {{"tokens", Json::array()},
              {"token_logprobs", Json::array()},
              {"top_logprobs", top.empty() ? Json(nullptr) : Json::array()},
              {"text_offset", Json::array()}};
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string text = TokenText(*c.tokenizer, tokens[i]);
    out["tokens"].push_back(text);
    out["token_logprobs"].push_back(i < logprobs.size() ? logprobs[i] : 0.0f);
    out["text_offset"].push_back(text_offset);
    text_offset += static_cast<int64_t>(c.tokenizer->TokenBytes(tokens[i]).size());
    if (i < top.size()) {
      Json alternatives = Json::object();
      for (const auto& [id, lp] : top[i]) alternatives[TokenText(*c.tokenizer, id)] = lp;
      out["top_logprobs"].push_back(alternatives);
    }
  }
  return out;
}

// Chat's logprobs object: {"content": [{token, logprob, bytes, top_logprobs}]}.
Json ChatLogprobs(const ResponseContext& c, const std::vector<int64_t>& tokens,
                  const std::vector<float>& logprobs,
                  const std::vector<std::vector<std::pair<int64_t, float>>>& top) {
  Json content = Json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    Json alternatives = Json::array();
    if (i < top.size()) {
      for (const auto& [id, lp] : top[i]) {
        alternatives.push_back({{"token", TokenText(*c.tokenizer, id)},
                                {"logprob", lp},
                                {"bytes", TokenBytes(*c.tokenizer, id)}});
      }
    }
    content.push_back({{"token", TokenText(*c.tokenizer, tokens[i])},
                       {"logprob", i < logprobs.size() ? logprobs[i] : 0.0f},
                       {"bytes", TokenBytes(*c.tokenizer, tokens[i])},
                       {"top_logprobs", alternatives}});
  }
  return {{"content", content}};
}

Json Logprobs(const ResponseContext& c, const std::vector<int64_t>& tokens,
              const std::vector<float>& logprobs,
              const std::vector<std::vector<std::pair<int64_t, float>>>& top, int64_t text_offset) {
  if (!c.logprobs) return nullptr;
  return c.kind == ApiKind::kChat ? ChatLogprobs(c, tokens, logprobs, top)
                                  : CompletionLogprobs(c, tokens, logprobs, top, text_offset);
}

Json Usage(const std::vector<ChoiceLog>& choices) {
  int64_t prompt = 0, completion = 0, cached = 0;
  if (!choices.empty()) {
    prompt = choices[0].last.prompt_tokens;
    cached = choices[0].last.cached_tokens;
  }
  for (const ChoiceLog& choice : choices) completion += choice.last.completion_tokens;
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

Json Envelope(const ResponseContext& c, bool chunk) {
  const char* object = c.kind == ApiKind::kChat
                           ? (chunk ? "chat.completion.chunk" : "chat.completion")
                           : "text_completion";
  return {{"id", c.id}, {"object", object}, {"created", c.created}, {"model", c.model}};
}

}  // namespace

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

Json ErrorObject(const absl::Status& status) {
  const int http = HttpStatusOf(status.code());
  const char* type = http == 400   ? "invalid_request_error"
                     : http == 401 ? "authentication_error"
                     : http == 404 ? "not_found_error"
                     : http == 429 ? "rate_limit_error"
                     : http == 503 ? "server_unavailable"
                     : http == 504 ? "timeout"
                                   : "server_error";
  const std::string message(status.message());
  Json param = nullptr;
  if (std::string field = FieldOf(status); !field.empty()) param = std::move(field);
  std::string code = absl::AsciiStrToLower(std::string(absl::StatusCodeToString(status.code())));
  if (status.code() == absl::StatusCode::kNotFound && param == "model") code = "model_not_found";
  return {{"error", {{"message", message}, {"type", type}, {"param", param}, {"code", code}}}};
}

HttpResponse ErrorReply(const absl::Status& status) {
  return JsonReply(HttpStatusOf(status.code()), ErrorObject(status));
}

HttpResponse JsonReply(int status, const Json& body) {
  HttpResponse response;
  response.status = status;
  response.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return response;
}

namespace {

// A singular field of a message as JSON: numbers stay numbers (proto3's
// JSON mapping would quote 64-bit ones).
Json Value(const google::protobuf::Message& message, const google::protobuf::FieldDescriptor& f) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection& r = *message.GetReflection();
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return r.GetInt32(message, &f);
    case FieldDescriptor::CPPTYPE_INT64:
      return r.GetInt64(message, &f);
    case FieldDescriptor::CPPTYPE_UINT32:
      return r.GetUInt32(message, &f);
    case FieldDescriptor::CPPTYPE_UINT64:
      return r.GetUInt64(message, &f);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return r.GetDouble(message, &f);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return r.GetFloat(message, &f);
    case FieldDescriptor::CPPTYPE_BOOL:
      return r.GetBool(message, &f);
    case FieldDescriptor::CPPTYPE_ENUM:
      return r.GetEnum(message, &f)->name();
    case FieldDescriptor::CPPTYPE_STRING:
      return r.GetString(message, &f);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return nullptr;
}

Json RepeatedValue(const google::protobuf::Message& message,
                   const google::protobuf::FieldDescriptor& f, int index) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection& r = *message.GetReflection();
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT64:
      return r.GetRepeatedInt64(message, &f, index);
    case FieldDescriptor::CPPTYPE_STRING:
      return r.GetRepeatedString(message, &f, index);
    default:
      return nullptr;  // ModelInfo repeats strings only
  }
}

}  // namespace

Json ModelObject(const attn::v1::ModelInfo& info, int64_t created) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection& fields = *info.GetReflection();
  const google::protobuf::Descriptor& descriptor = *info.GetDescriptor();
  Json extension = Json::object();
  for (int i = 0; i < descriptor.field_count(); ++i) {
    const FieldDescriptor& field = *descriptor.field(i);
    if (field.name() == "name") continue;  // the object's id
    if (field.is_repeated()) {
      Json values = Json::array();
      for (int j = 0; j < fields.FieldSize(info, &field); ++j) {
        values.push_back(RepeatedValue(info, field, j));
      }
      extension[field.name()] = std::move(values);
    } else if (fields.HasField(info, &field)) {
      extension[field.name()] = Value(info, field);
    }
  }
  return {{"id", info.name()},
          {"object", "model"},
          {"created", created},
          {"owned_by", "attn"},
          {"attn", std::move(extension)}};
}

void ChoiceLog::Add(const StreamEvent& event) {
  text += event.text;
  tokens.insert(tokens.end(), event.token_ids.begin(), event.token_ids.end());
  logprobs.insert(logprobs.end(), event.logprobs.begin(), event.logprobs.end());
  top.insert(top.end(), event.top_logprobs.begin(), event.top_logprobs.end());
  if (event.last) {
    done = true;
    last = event;
  }
}

bool Blank(const std::string& text) {
  return text.find_first_not_of(" \t\r\n") == std::string::npos;
}

ResponseContext NewResponseContext(ApiKind kind, const std::string& model,
                                   const std::string& fingerprint, const Tokenizer& tokenizer,
                                   bool logprobs, bool include_usage) {
  static thread_local std::mt19937_64 random(std::random_device{}());
  ResponseContext c;
  c.kind = kind;
  c.id = absl::StrCat(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-",
                      absl::Hex(random(), absl::kZeroPad16));
  c.created = absl::ToUnixSeconds(absl::Now());
  c.model = model;
  c.fingerprint = fingerprint;
  c.tokenizer = &tokenizer;
  c.logprobs = logprobs;
  c.include_usage = include_usage;
  return c;
}

Json StateExtension(const ResponseContext& c, const ChoiceLog& choice) {
  if (!choice.last.state) return nullptr;
  const std::string blob =
      EncodeStateBlob({c.fingerprint, choice.last.state_tokens, choice.last.state});
  return {{"data", absl::Base64Escape(blob)},
          {"reply_stopped", choice.last.finish_reason == FinishReason::kStop},
          {"tokens", choice.last.state_tokens}};
}

namespace {

// "call_" and 24 random hex digits, as OpenAI's ids look.
std::string NewToolCallId() {
  static thread_local std::mt19937_64 random(std::random_device{}());
  return absl::StrCat("call_", absl::Hex(random(), absl::kZeroPad16),
                      absl::Hex(random() >> 32, absl::kZeroPad8));
}

Json ToolCallObject(const ToolCall& call) {
  return {{"id", NewToolCallId()},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

// A whole chat reply as OpenAI's message: its tool calls read out when the
// request's tools ask for them; "tool_calls" then finishes it.
Json ReplyMessage(const ResponseContext& c, const ChoiceLog& choice, Json* finish_reason) {
  Json message = {{"role", "assistant"}, {"content", choice.text}};
  if (c.tool_calls == ToolCallFormat::kNone) return message;
  ToolCallText parsed = ParseToolCalls(c.tool_calls, choice.text);
  if (parsed.calls.empty()) return message;
  if (!c.parallel_tool_calls) parsed.calls.resize(1);
  message["content"] = Blank(parsed.content) ? Json(nullptr) : Json(parsed.content);
  message["tool_calls"] = Json::array();
  for (const ToolCall& call : parsed.calls) message["tool_calls"].push_back(ToolCallObject(call));
  if (choice.last.finish_reason != FinishReason::kLength) *finish_reason = "tool_calls";
  return message;
}

}  // namespace

Json CompletionResponse(const ResponseContext& c, const std::vector<ChoiceLog>& choices) {
  Json out = Envelope(c, /*chunk=*/false);
  out["choices"] = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceLog& choice = choices[i];
    Json entry = {{"index", i},
                  {"logprobs", Logprobs(c, choice.tokens, choice.logprobs, choice.top, 0)},
                  {"finish_reason", FinishName(choice.last.finish_reason)}};
    if (c.kind == ApiKind::kChat) {
      entry["message"] = ReplyMessage(c, choice, &entry["finish_reason"]);
    } else {
      entry["text"] = choice.text;
    }
    if (Json state = StateExtension(c, choice); !state.is_null()) entry["attn_state"] = state;
    out["choices"].push_back(entry);
  }
  out["usage"] = Usage(choices);
  return out;
}

Json StreamChunk(const ResponseContext& c, int64_t index, const StreamEvent& event, bool first,
                 int64_t text_offset) {
  Json out = Envelope(c, /*chunk=*/true);
  Json choice = {{"index", index}};
  if (c.kind == ApiKind::kChat) {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!event.text.empty() || first) delta["content"] = event.text;
    choice["delta"] = delta;
  } else {
    choice["text"] = event.text;
  }
  choice["logprobs"] =
      Logprobs(c, event.token_ids, event.logprobs, event.top_logprobs, text_offset);
  choice["finish_reason"] = event.last ? Json(FinishName(event.finish_reason)) : Json(nullptr);
  out["choices"] = Json::array({choice});
  return out;
}

std::vector<Json> ToolCallChunks(const ResponseContext& c, int64_t index, const StreamEvent& event,
                                 ChoiceLog* log) {
  if (log->tool_stream == nullptr)
    log->tool_stream = std::make_shared<ToolCallStream>(c.tool_calls);
  ToolCallText part = log->tool_stream->Push(event.text, event.last);
  if (!c.parallel_tool_calls && log->calls_sent + static_cast<int64_t>(part.calls.size()) > 1) {
    part.calls.resize(log->calls_sent > 0 ? 0 : 1);
  }
  StreamEvent shown = event;
  shown.text = part.content;
  shown.last = event.last && part.calls.empty() && log->calls_sent == 0;
  std::vector<Json> out = {StreamChunk(c, index, shown, !log->started, log->text_bytes)};
  for (const ToolCall& call : part.calls) {
    Json head = ToolCallObject(call);
    const std::string arguments = head["function"]["arguments"].get<std::string>();
    head["function"]["arguments"] = "";
    head["index"] = log->calls_sent++;
    for (Json delta :
         {head, Json{{"index", head["index"]}, {"function", {{"arguments", arguments}}}}}) {
      Json chunk = StreamChunk(c, index, StreamEvent(), false, 0);
      chunk["choices"][0]["delta"] = {{"tool_calls", Json::array({delta})}};
      out.push_back(std::move(chunk));
    }
  }
  if (event.last && !shown.last) {  // the finish after the calls
    Json chunk = StreamChunk(c, index, StreamEvent(), false, 0);
    chunk["choices"][0]["delta"] = Json::object();
    chunk["choices"][0]["finish_reason"] =
        event.finish_reason == FinishReason::kLength ? "length" : "tool_calls";
    out.push_back(std::move(chunk));
  }
  return out;
}

Json UsageChunk(const ResponseContext& c, const std::vector<ChoiceLog>& choices) {
  Json out = Envelope(c, /*chunk=*/true);
  out["choices"] = Json::array();
  out["usage"] = Usage(choices);
  return out;
}

std::string ServerSentEvent(const Json& data) {
  return absl::StrCat("data: ", data.dump(-1, ' ', false, Json::error_handler_t::replace), "\n\n");
}

}  // namespace attn::serving::http
