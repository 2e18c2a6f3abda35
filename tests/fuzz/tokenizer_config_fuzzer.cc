// A tokenizer_config.json (beside a downloaded model) and a package's
// "chat_template" object, both outside input: each is read or refused by
// name, what is read becomes a chat template or is refused naming the
// template's line, and a package's object reads back as it was written.
#include <cstdint>
#include <string>

#include "model/text/chat_template.h"

namespace {

void Check(const absl::StatusOr<attn::ChatTemplateConfig>& config) {
  if (!config.ok()) {
    if (config.status().message().empty()) __builtin_trap();
    return;
  }
  auto again = attn::ChatTemplateConfig::FromJson(config->ToJson());
  if (config->templates.empty()) return;
  auto chat = attn::ChatTemplate::Create(*config);
  // A config whose templates parse reads back with the same templates.
  if (chat.ok() && (!again.ok() || again->templates != config->templates)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Check(attn::ParseTokenizerConfig(text, "tokenizer_config.json"));
  Check(attn::ChatTemplateConfig::FromJson(text));
  return 0;
}
