#include "client/chat.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "attn/v1/text_generation.grpc.pb.h"
#include "client/health.h"
#include "nlohmann/json.hpp"

namespace attn::client {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct TurnResult {
  std::string reply;
  attn::v1::GenerateResponse last;  // usage, state
  double ttft_ms = 0;
  double total_ms = 0;
};

// One turn as a stream, printing the reply as it arrives unless `quiet`.
grpc::Status RunTurn(attn::v1::TextGeneration::Stub& stub, const attn::v1::GenerateRequest& request,
                     bool quiet, TurnResult* out) {
  grpc::ClientContext context;
  const Clock::time_point start = Clock::now();
  auto reader = stub.GenerateStream(&context, request);
  attn::v1::GenerateResponse message;
  bool first = true;
  while (reader->Read(&message)) {
    if (first && message.token_ids_size() > 0) {
      out->ttft_ms = Ms(Clock::now() - start);
      first = false;
    }
    out->reply += message.text();
    if (!quiet) {
      std::fputs(message.text().c_str(), stdout);
      std::fflush(stdout);
    }
    if (message.has_usage()) out->last = message;
  }
  out->total_ms = Ms(Clock::now() - start);
  return reader->Finish();
}

void Report(const ChatOptions& options, int turn, size_t server, const TurnResult& result) {
  const attn::v1::Usage& usage = result.last.usage();
  if (options.json) {
    const nlohmann::json line = {
        {"turn", turn},
        {"server", options.server_names[server]},
        {"prompt_tokens", usage.prompt_tokens()},
        {"prefilled_tokens", usage.prefilled_tokens()},
        {"cached_tokens", usage.cached_tokens()},
        {"completion_tokens", usage.completion_tokens()},
        {"ttft_ms", result.ttft_ms},
        {"total_ms", result.total_ms},
        {"state_bytes", result.last.state().size()},
        {"reply", result.reply},
    };
    std::printf("%s\n",
                line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    std::fflush(stdout);
    return;
  }
  std::fprintf(
      stderr,
      "\n[turn %d on %s: prefilled %ld tokens, reused %ld, first token %.1f ms, "
      "%ld tokens in %.1f ms%s]\n",
      turn, options.server_names[server].c_str(), static_cast<long>(usage.prefilled_tokens()),
      static_cast<long>(usage.cached_tokens()), result.ttft_ms,
      static_cast<long>(usage.completion_tokens()), result.total_ms,
      options.hold_state ? absl::StrFormat(", state %zu bytes", result.last.state().size()).c_str()
                         : "");
}

}  // namespace

namespace {

// The request of one turn: `line` after the conversation so far
// (`history`, or the held `state` and how the last reply ended).
attn::v1::GenerateRequest TurnRequest(const ChatOptions& options,
                                      const std::vector<ChatMessage>& history,
                                      const std::string& line, const std::string& state,
                                      bool reply_stopped) {
  attn::v1::GenerateRequest request = options.base;
  for (const std::string& stop : ChatStops(options.format)) request.add_stop(stop);
  const ChatMessage user{"user", line};
  if (options.hold_state && !state.empty()) {
    // The state holds the conversation and started from any initial state.
    request.set_prompt(ContinueChat(options.format, {user}, reply_stopped));
    request.set_state(state);
    request.clear_initial_state();
  } else {
    std::vector<ChatMessage> messages = history;
    messages.push_back(user);
    request.set_prompt(RenderChat(options.format, messages));
  }
  request.set_return_state(options.hold_state);
  return request;
}

}  // namespace

int RunChat(std::istream& input, const ChatOptions& options) {
  if (options.servers.empty()) {
    std::fprintf(stderr, "error: --servers: no server to talk to\n");
    return 2;
  }
  std::vector<std::unique_ptr<attn::v1::TextGeneration::Stub>> stubs;
  for (const auto& channel : options.servers) {
    stubs.push_back(attn::v1::TextGeneration::NewStub(channel));
  }
  const std::vector<ChatMessage> opening =
      options.system.empty() ? std::vector<ChatMessage>{}
                             : std::vector<ChatMessage>{{"system", options.system}};
  std::vector<ChatMessage> history = opening;  // every turn, for !hold_state
  std::string state;                           // the last reply's, for hold_state
  bool reply_stopped = false;                  // whether it ended at a chat stop
  std::string line;
  int turn = 0;
  if (options.interactive) std::fputs("> ", stderr);
  while (std::getline(input, line)) {
    if (line.empty()) continue;
    if (turn > 0) absl::SleepFor(options.pause);
    ++turn;
    const size_t server = static_cast<size_t>(turn - 1) % stubs.size();
    if (options.fresh_turns) {
      history = opening;
      state.clear();
    }
    const attn::v1::GenerateRequest request =
        TurnRequest(options, history, line, state, reply_stopped);
    TurnResult result;
    grpc::Status status = RunTurn(*stubs[server], request, options.json, &result);
    if (!status.ok()) {
      std::fprintf(stderr, "error: turn %d on %s: %s: %s\n", turn,
                   options.server_names[server].c_str(), StatusCodeName(status.error_code()),
                   status.error_message().c_str());
      return 1;
    }
    history.push_back({"user", line});
    history.push_back({"assistant", result.reply});
    state = result.last.state();
    reply_stopped = result.last.finish_reason() == attn::v1::FINISH_REASON_STOP;
    Report(options, turn, server, result);
    if (options.interactive) std::fputs("> ", stderr);
  }
  return 0;
}

}  // namespace attn::client
