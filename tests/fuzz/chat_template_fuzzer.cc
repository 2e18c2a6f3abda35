// A chat template (data from the internet: tokenizer_config.json,
// chat_template.jinja, --chat_template) through the Jinja interpreter
// (model/jinja/template.h): any text parses or is refused, and a parsed one
// renders a conversation with tools or fails, within small limits, without
// a crash, a hang or unbounded memory.
#include <cstdint>
#include <string>

#include "model/jinja/template.h"
#include "nlohmann/json.hpp"

namespace {

const nlohmann::ordered_json& Variables() {
  static const nlohmann::ordered_json vars = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "abc123def", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2.5, null]}}}]},
      {"role": "tool", "tool_call_id": "abc123def", "name": "get_weather", "content": "{\"t\": 21}"},
      {"role": "assistant", "content": "Sunny, 21 °C."}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  return vars;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto tmpl = attn::jinja::Template::Parse(std::string(reinterpret_cast<const char*>(data), size));
  if (!tmpl.ok()) return 0;
  attn::jinja::RenderOptions options;
  options.limits.max_output_bytes = 1 << 20;
  options.limits.max_steps = 200'000;
  options.strftime_now = [](const std::string& format) { return format; };
  (void)tmpl->Render(Variables(), options);
  return 0;
}
