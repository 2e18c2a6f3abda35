// Tool calls in a model's output, in the format its chat template writes
// (chat_template.h's DetectToolCallFormat names it):
//
//   hermes       <tool_call>{"name": ..., "arguments": {...}}</tool_call>, any
//                number, text around them (Hermes, Qwen 2.5 and 3, and the
//                built-in chat formats);
//   llama3-json  the whole reply one JSON object {"name": ..., "parameters":
//                {...}} (or "arguments"), after an optional <|python_tag|>,
//                several separated by ';';
//   lfm2         <|tool_call_start|>[f(a=1, b="x"), g()]<|tool_call_end|>:
//                Python calls with literal keyword arguments;
//   mistral      [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] to the
//                end of the reply, or [TOOL_CALLS]name[ARGS]{...} (V11);
//   granite      <|tool_call|>[{"name": ..., "arguments": {...}}, ...] to the end.
//
// Text that is not a well-formed call stays content: a parse never fails.
// Arguments come back as compact JSON text of an object, as OpenAI's
// function.arguments carries them.
#pragma once

#include <string>
#include <vector>

#include "model/text/chat_format.h"

namespace attn {

enum class ToolCallFormat { kNone, kHermes, kLlama3Json, kLfm2, kMistral, kGranite };

// "hermes", "llama3-json", "lfm2", "mistral", "granite"; "" for kNone.
std::string ToolCallFormatName(ToolCallFormat format);
bool ParseToolCallFormat(const std::string& name, ToolCallFormat* format);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text
  bool operator==(const ToolCall& other) const {
    return name == other.name && arguments == other.arguments;
  }
};

struct ToolCallText {
  std::string content;  // the text outside the calls
  std::vector<ToolCall> calls;
};

// The calls in a whole reply.
ToolCallText ParseToolCalls(ToolCallFormat format, const std::string& text);

// The same for a reply that arrives in pieces: Push releases the text that
// can no longer become part of a call and the calls completed so far; text
// that may still be a call's start is held back until it is decided.
// Finish releases the rest (held text that never became a call is content).
class ToolCallStream {
 public:
  explicit ToolCallStream(ToolCallFormat format) : format_(format) {}
  ToolCallText Push(const std::string& text);
  ToolCallText Finish();
  // Push, and with the reply's last piece (`last`) Finish too.
  ToolCallText Push(const std::string& text, bool last);

 private:
  ToolCallText Release(bool final);

  ToolCallFormat format_;
  std::string pending_;  // text not released yet
};

// A chat with tools for a built-in chat format, which knows only system,
// user and assistant turns, in the Hermes style RWKV-7 G1 was trained on:
// the tools (`tools_json`, a JSON array of OpenAI function tools; empty for
// none) listed at the end of the system turn, one added when there is none;
// an assistant's tool calls (ChatMessage::json's tool_calls) written after
// its text as <tool_call> JSON; tool results as a user turn of
// <tool_response> blocks. Replies are then read in the hermes format.
std::vector<ChatMessage> HermesToolTurns(const std::vector<ChatMessage>& messages,
                                         const std::string& tools_json);

}  // namespace attn
