#include "server/http/responses_output.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/http/openai_response.h"

namespace attn::serving::http {
namespace {

Json MessageItem(const std::string& id, const std::string& text, const char* status) {
  Json content = Json::array();
  if (std::string(status) == "completed") {
    content.push_back({{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}});
  }
  return {{"id", id},
          {"type", "message"},
          {"status", status},
          {"role", "assistant"},
          {"content", std::move(content)}};
}

Json CallItem(const ToolCall& call, const std::string& arguments, const char* status) {
  return {{"id", NewItemId("fc_")}, {"type", "function_call"},       {"status", status},
          {"arguments", arguments}, {"call_id", NewItemId("call_")}, {"name", call.name}};
}

// The reply's text and calls, as the request's tools ask them read.
ToolCallText Parsed(const ResponsesContext& c, const std::string& text) {
  if (c.tool_calls == ToolCallFormat::kNone) return {text, {}};
  ToolCallText parsed = ParseToolCalls(c.tool_calls, text);
  if (!c.parallel_tool_calls && parsed.calls.size() > 1) parsed.calls.resize(1);
  return parsed;
}

}  // namespace

std::string NewItemId(const char* prefix) {
  static thread_local std::mt19937_64 random(std::random_device{}());
  return absl::StrCat(prefix, absl::Hex(random(), absl::kZeroPad16),
                      absl::Hex(random(), absl::kZeroPad16));
}

ResponsesContext NewResponsesContext(const ResponsesRequest& r, const std::string& model,
                                     ToolCallFormat model_format) {
  ResponsesContext c;
  c.id = NewItemId("resp_");
  c.created = absl::ToUnixSeconds(absl::Now());
  c.model = model;
  if (!r.tools_json.empty() && !r.tool_choice.none) c.tool_calls = model_format;
  c.parallel_tool_calls = r.parallel_tool_calls;
  auto or_null = [](const auto& value) { return value ? Json(*value) : Json(nullptr); };
  c.echo = {{"instructions", or_null(r.instructions)},
            {"max_output_tokens", or_null(r.max_output_tokens)},
            {"parallel_tool_calls", r.parallel_tool_calls},
            {"previous_response_id",
             r.previous_response_id.empty() ? Json(nullptr) : Json(r.previous_response_id)},
            {"store", r.store},
            {"temperature", r.temperature},
            {"text", {{"format", r.text_format}}},
            {"tool_choice", r.tool_choice.ToResponsesJson()},
            {"tools", r.tools},
            {"top_p", r.top_p},
            {"truncation", "disabled"},
            {"user", r.user.empty() ? Json(nullptr) : Json(r.user)},
            {"metadata", r.metadata}};
  return c;
}

Json OutputItems(const ResponsesContext& c, const std::string& text) {
  ToolCallText parsed = Parsed(c, text);
  Json output = Json::array();
  if (parsed.calls.empty() || !Blank(parsed.content)) {
    output.push_back(MessageItem(NewItemId("msg_"), parsed.content, "completed"));
  }
  for (const ToolCall& call : parsed.calls) {
    output.push_back(CallItem(call, call.arguments, "completed"));
  }
  return output;
}

ChatMessage ReplyMessage(const Json& output) {
  std::string text;
  Json calls = Json::array();
  for (const Json& item : output) {
    if (item["type"] == "message") {
      for (const Json& part : item["content"]) text += part.value("text", "");
    } else if (item["type"] == "function_call") {
      calls.push_back(
          {{"id", item["call_id"]},
           {"type", "function"},
           {"function",
            {{"name", item["name"]},
             {"arguments", Json::parse(item["arguments"].get<std::string>(), nullptr, false)}}}});
    }
  }
  Json message = {{"role", "assistant"}, {"content", text}};
  if (!calls.empty()) message["tool_calls"] = std::move(calls);
  return {"assistant", text, message.dump()};
}

Json ResponseObject(const ResponsesContext& c, const Json& output, const StreamEvent* last) {
  const bool incomplete = last != nullptr && last->finish_reason == FinishReason::kLength;
  Json out = {
      {"id", c.id},
      {"object", "response"},
      {"created_at", c.created},
      {"status", last == nullptr ? "in_progress"
                 : incomplete    ? "incomplete"
                                 : "completed"},
      {"error", nullptr},
      {"incomplete_details", incomplete ? Json{{"reason", "max_output_tokens"}} : Json(nullptr)},
      {"model", c.model},
      {"output", output}};
  for (const auto& item : c.echo.items()) out[item.key()] = item.value();
  Json usage = nullptr;
  if (last != nullptr) {
    usage = {{"input_tokens", last->prompt_tokens},
             {"input_tokens_details", {{"cached_tokens", last->cached_tokens}}},
             {"output_tokens", last->completion_tokens},
             {"output_tokens_details", {{"reasoning_tokens", 0}}},
             {"total_tokens", last->prompt_tokens + last->completion_tokens}};
  }
  out["usage"] = std::move(usage);
  return out;
}

ResponsesEvents::ResponsesEvents(ResponsesContext context, OnResponse on_response)
    : context_(std::move(context)), on_response_(std::move(on_response)) {
  if (context_.tool_calls != ToolCallFormat::kNone) {
    tool_stream_ = std::make_unique<ToolCallStream>(context_.tool_calls);
  }
}

std::string ResponsesEvents::Emit(const std::string& type, Json data) {
  Json event = {{"type", type}, {"sequence_number", sequence_++}};
  for (auto& item : data.items()) event[item.key()] = std::move(item.value());
  return absl::StrCat("event: ", type,
                      "\ndata: ", event.dump(-1, ' ', false, Json::error_handler_t::replace),
                      "\n\n");
}

std::string ResponsesEvents::Begin() {
  const Json response = ResponseObject(context_, Json::array(), nullptr);
  std::string out = Emit("response.created", {{"response", response}});
  return out + Emit("response.in_progress", {{"response", response}});
}

void ResponsesEvents::Text(const std::string& delta, std::string* out) {
  if (open_message_ < 0) {
    open_message_ = static_cast<int64_t>(output_.size());
    output_.push_back(MessageItem(NewItemId("msg_"), "", "in_progress"));
    message_text_.clear();
    *out += Emit("response.output_item.added",
                 {{"output_index", open_message_}, {"item", output_.back()}});
    *out +=
        Emit("response.content_part.added",
             {{"item_id", output_.back()["id"]},
              {"output_index", open_message_},
              {"content_index", 0},
              {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}}}});
  }
  if (delta.empty()) return;
  message_text_ += delta;
  *out += Emit("response.output_text.delta", {{"item_id", output_[open_message_]["id"]},
                                              {"output_index", open_message_},
                                              {"content_index", 0},
                                              {"delta", delta},
                                              {"logprobs", Json::array()}});
}

void ResponsesEvents::CloseMessage(std::string* out) {
  if (open_message_ < 0) return;
  Json& item = output_[open_message_];
  const Json id = item["id"];
  item = MessageItem(id.get<std::string>(), message_text_, "completed");
  const Json part = item["content"][0];
  const Json at = {{"item_id", id}, {"output_index", open_message_}, {"content_index", 0}};
  Json done = at;
  done["text"] = message_text_;
  done["logprobs"] = Json::array();
  *out += Emit("response.output_text.done", std::move(done));
  Json part_done = at;
  part_done["part"] = part;
  *out += Emit("response.content_part.done", std::move(part_done));
  *out += Emit("response.output_item.done", {{"output_index", open_message_}, {"item", item}});
  open_message_ = -1;
}

void ResponsesEvents::Call(const ToolCall& call, std::string* out) {
  if (!context_.parallel_tool_calls && calls_ > 0) return;
  ++calls_;
  CloseMessage(out);
  const int64_t index = static_cast<int64_t>(output_.size());
  output_.push_back(CallItem(call, "", "in_progress"));
  Json& item = output_.back();
  *out += Emit("response.output_item.added", {{"output_index", index}, {"item", item}});
  const Json at = {{"item_id", item["id"]}, {"output_index", index}};
  Json delta = at;
  delta["delta"] = call.arguments;
  *out += Emit("response.function_call_arguments.delta", std::move(delta));
  Json done = at;
  done["arguments"] = call.arguments;
  *out += Emit("response.function_call_arguments.done", std::move(done));
  item["arguments"] = call.arguments;
  item["status"] = "completed";
  *out += Emit("response.output_item.done", {{"output_index", index}, {"item", item}});
}

std::string ResponsesEvents::Event(int64_t /*choice*/, const StreamEvent& event) {
  std::string out;
  const ToolCallText part =
      tool_stream_ ? tool_stream_->Push(event.text, event.last) : ToolCallText{event.text, {}};
  // Blank text opens no message (it only separates calls) unless text
  // follows it or the reply has nothing else.
  if (open_message_ < 0 && Blank(part.content)) {
    held_ += part.content;
  } else if (!part.content.empty()) {
    Text(std::exchange(held_, "") + part.content, &out);
  }
  for (const ToolCall& call : part.calls) {
    held_.clear();
    Call(call, &out);
  }
  if (event.last) {
    if (output_.empty()) Text(held_, &out);
    CloseMessage(&out);
    last_ = event;
  }
  return out;
}

std::string ResponsesEvents::Failed(const absl::Status& status) {
  const Json error = ErrorObject(status)["error"];
  return Emit("error",
              {{"code", error["code"]}, {"message", error["message"]}, {"param", error["param"]}});
}

std::string ResponsesEvents::Done() {
  const Json response = ResponseObject(context_, output_, &last_);
  if (on_response_) on_response_(response, last_, ReplyMessage(output_));
  return Emit(response["status"] == "incomplete" ? "response.incomplete" : "response.completed",
              {{"response", response}});
}

}  // namespace attn::serving::http
