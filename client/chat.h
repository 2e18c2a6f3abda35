// attnctl chat: a multi-turn conversation, each turn one GenerateStream.
//
// Turns are written in the model's chat format (model/text/chat_format.h,
// ListModels' chat_format): "User: ..." turns and the "Assistant:" cue, and
// a reply ends where the format says a turn ends.
//
// With hold_state (the default) the client keeps the sequence's state: each
// turn sends only its new text with the state the previous reply returned
// (GenerateRequest.state), so every turn prefills about the same number of
// tokens however long the conversation, and any replica can serve any turn
// (the servers are used in turn, round-robin). Without it each turn sends
// the whole conversation as text, which the server's state cache, or the
// shared state tier behind every replica (--state_store), may hold.
#pragma once

#include <grpcpp/grpcpp.h>

#include <istream>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "attn/v1/text_generation.pb.h"
#include "model/text/chat_format.h"

namespace attn::client {

struct ChatOptions {
  std::vector<std::shared_ptr<grpc::Channel>> servers;  // turns go round-robin
  std::vector<std::string> server_names;                // for the report
  // Sampling, max_tokens, model: every field but the prompt and the state.
  attn::v1::GenerateRequest base;
  bool hold_state = true;
  // Text every conversation starts with (a system prompt), sent with the
  // first turn.
  std::string system;
  // Each line of the input is a new conversation after `system` instead of
  // the next turn of one conversation.
  bool fresh_turns = false;
  absl::Duration pause;  // before each turn after the first
  bool json = false;     // a JSON line per turn on stdout instead of the text
  bool interactive = false;
  ChatFormat format = ChatFormat::kPlain;  // the model's (ListModels' chat_format)
};

// Reads one turn per line from `input` until its end; prints each reply as
// it streams (and, on stderr, the tokens prefilled and reused and the time
// to the first token). Returns a process exit code.
int RunChat(std::istream& input, const ChatOptions& options);

}  // namespace attn::client
