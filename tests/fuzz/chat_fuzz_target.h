// What the fuzzers of OpenAI request bodies convert chats with: a bytes
// tokenizer, and a chat template that touches whatever a request can carry
// (every key of every message, tool calls' parsed arguments, the tools).
#pragma once

#include <memory>

#include "model/text/chat_template.h"
#include "model/text/tokenizer.h"

namespace attn::fuzzing {

inline const Tokenizer& BytesTokenizer() {
  static const auto* tokenizer = new Tokenizer(*Tokenizer::Bytes(300, 256));
  return *tokenizer;
}

inline const ChatTemplate& EveryKeyTemplate() {
  static const auto* chat = [] {
    ChatTemplateConfig config;
    config.source = "fuzz.jinja";
    config.templates["default"] =
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content if m.content is string else '' }}"
        "{% for k, v in m.items() %}{{ k }}={{ v | tojson }};{% endfor %}"
        "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.name }}"
        "{{ c.function.arguments | tojson }}</tool_call>{% endfor %}{% endfor %}"
        "{% if tools %}{% for t in tools %}{{ t.function.name }}{% endfor %}{% endif %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}";
    return new std::shared_ptr<const ChatTemplate>(*ChatTemplate::Create(config));
  }();
  return **chat;
}

}  // namespace attn::fuzzing
