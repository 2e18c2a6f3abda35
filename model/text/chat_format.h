// How a conversation becomes a prompt for a model: the prompt format a
// package declares (its config's "chat_format"), shared by every chat
// client of the server (attnctl chat, an HTTP chat API).
//
//   plain       "System: ...\nUser: ...\nAssistant: ...\n" turns for base
//               models; a reply stops where the model starts a "\nUser:"
//               turn of its own;
//   rwkv-world  RWKV World's "System: ...\n\nUser: ...\n\nAssistant: ...\n\n"
//               turns; a reply stops at a blank line ("\n\n").
// A turn's text has its blank lines collapsed in rwkv-world (a blank line
// would end it), and each prompt ends with "Assistant:", the model's cue.
// Text that starts with white space follows the colon as it is, so a reply
// the model generated after the cue (" It is...") renders as the tokens the
// model saw, and a stateless client's next prompt extends the stored state
// of the last turn (the state cache, --state_store) instead of diverging
// from it at the reply's first token.
#pragma once

#include <string>
#include <vector>

namespace attn {

enum class ChatFormat { kPlain, kRwkvWorld };

std::string ChatFormatName(ChatFormat format);  // "plain", "rwkv-world"
bool ParseChatFormat(const std::string& name, ChatFormat* format);

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant" (a chat template's: any)
  std::string content;
  // The message as the client sent it, a JSON object, for a model's chat
  // template (chat_template.h): its keys unchanged, tool calls' arguments
  // parsed into objects. Empty: {"role", "content"}.
  std::string json = {};
};

// The prompt for the model's next reply after `messages` (roles other than
// the three above are the caller's to refuse); without the cue for that
// reply when add_generation_prompt is false.
std::string RenderChat(ChatFormat format, const std::vector<ChatMessage>& messages,
                       bool add_generation_prompt = true);

// The text that continues a conversation whose earlier turns and the
// model's last reply are already in a state: the end of that reply's turn
// (unless the reply stopped at one of ChatStops, whose tokens the state
// then holds), then `messages` and the cue for the next reply.
std::string ContinueChat(ChatFormat format, const std::vector<ChatMessage>& messages,
                         bool reply_stopped);

// Where a reply ends unless the request says otherwise.
std::vector<std::string> ChatStops(ChatFormat format);

}  // namespace attn
