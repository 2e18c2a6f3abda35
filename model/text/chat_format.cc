#include "model/text/chat_format.h"

#include <cctype>
#include <utility>

#include "util/enum_names.h"

namespace attn {
namespace {

constexpr std::pair<ChatFormat, const char*> kChatFormatNames[] = {
    {ChatFormat::kPlain, "plain"},
    {ChatFormat::kRwkvWorld, "rwkv-world"},
};

// "user" -> "User".
std::string Speaker(const std::string& role) {
  if (role == "system") return "System";
  if (role == "assistant") return "Assistant";
  return "User";
}

// What ends a turn: a newline, or a blank line in rwkv-world.
std::string TurnEnd(ChatFormat format) { return format == ChatFormat::kRwkvWorld ? "\n\n" : "\n"; }

// The content with its blank lines collapsed where a blank line ends a turn.
std::string Content(ChatFormat format, std::string text) {
  if (format != ChatFormat::kRwkvWorld) return text;
  for (size_t at = text.find("\n\n"); at != std::string::npos; at = text.find("\n\n", at)) {
    text.erase(at, 1);
  }
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

std::string Turn(ChatFormat format, const ChatMessage& message) {
  const std::string content = Content(format, message.content);
  const bool spaced = !content.empty() && std::isspace(static_cast<unsigned char>(content[0]));
  return Speaker(message.role) + (spaced ? ":" : ": ") + content + TurnEnd(format);
}

}  // namespace

std::string ChatFormatName(ChatFormat format) { return EnumName(kChatFormatNames, format); }

bool ParseChatFormat(const std::string& name, ChatFormat* format) {
  return ParseEnumName(kChatFormatNames, name, format);
}

std::string RenderChat(ChatFormat format, const std::vector<ChatMessage>& messages,
                       bool add_generation_prompt) {
  std::string prompt;
  for (const ChatMessage& message : messages) prompt += Turn(format, message);
  return add_generation_prompt ? prompt + "Assistant:" : prompt;
}

std::string ContinueChat(ChatFormat format, const std::vector<ChatMessage>& messages,
                         bool reply_stopped) {
  std::string text = reply_stopped ? "" : TurnEnd(format);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    // A plain reply stops at "\nUser:", which already began a user's turn.
    if (i == 0 && reply_stopped && format == ChatFormat::kPlain && message.role == "user") {
      text += " " + Content(format, message.content) + TurnEnd(format);
    } else {
      text += Turn(format, message);
    }
  }
  return text + "Assistant:";
}

std::vector<std::string> ChatStops(ChatFormat format) {
  if (format == ChatFormat::kRwkvWorld) return {"\n\n"};
  return {"\nUser:"};
}

}  // namespace attn
