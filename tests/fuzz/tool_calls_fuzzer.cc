// A model's reply (text a model writes, which may imitate any markup)
// through the tool-call readers of model/text/tool_calls.h: the first byte
// picks the format and the split points; read whole and streamed in pieces,
// the reply gives the same content and calls, and nothing crashes.
#include <cstdint>
#include <string>

#include "model/text/tool_calls.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const attn::ToolCallFormat format = static_cast<attn::ToolCallFormat>(data[0] % 6);
  const size_t piece = 1 + (data[0] >> 3);
  const std::string reply(reinterpret_cast<const char*>(data) + 1, size - 1);
  const attn::ToolCallText whole = attn::ParseToolCalls(format, reply);
  attn::ToolCallStream stream(format);
  attn::ToolCallText streamed;
  for (size_t at = 0; at < reply.size(); at += piece) {
    attn::ToolCallText part = stream.Push(reply.substr(at, piece));
    streamed.content += part.content;
    streamed.calls.insert(streamed.calls.end(), part.calls.begin(), part.calls.end());
  }
  attn::ToolCallText rest = stream.Finish();
  streamed.content += rest.content;
  streamed.calls.insert(streamed.calls.end(), rest.calls.begin(), rest.calls.end());
  if (streamed.content != whole.content || !(streamed.calls == whole.calls)) __builtin_trap();
  return 0;
}
