// The Responses API's pieces: requests parsed item by item
// (server/http/responses_request.h), a turn that continues the state of the
// previous reply, the stream's events (server/http/responses_output.h), and
// the store with its expiry and bound (server/state/response_store.h).
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <sstream>

#include "absl/synchronization/notification.h"
#include "model/text/chat_template.h"
#include "model/text/tokenizer.h"
#include "server/http/openai_response.h"
#include "server/http/responses_output.h"
#include "server/http/responses_request.h"
#include "server/state/response_store.h"
#include "util/field_error.h"

namespace attn::serving::http {
namespace {

absl::StatusOr<ResponsesRequest> Parse(const std::string& fields) {
  return ParseResponsesRequest("{\"model\": \"m\", " + fields + "}");
}

std::string ParamOf(const absl::StatusOr<ResponsesRequest>& r) {
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : FieldOf(r.status());
}

TEST(ResponsesRequestTest, InputItemsBecomeChatMessages) {
  auto r = Parse(R"("input": [
      {"role": "developer", "content": "Be brief."},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Wea"},
                                                       {"type": "input_text", "text": "ther?"}]},
      {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
       "content": [{"type": "output_text", "text": "Let me see.", "annotations": []}]},
      {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "w",
       "arguments": "{\"city\": \"Paris\"}"},
      {"type": "function_call", "call_id": "c2", "name": "w", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "sunny"}],
      "tools": [{"type": "function", "name": "w", "parameters": {"type": "object"}}],
      "instructions": "", "max_output_tokens": 9, "store": false, "metadata": {"k": "v"})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->input.size(), 4u);
  EXPECT_EQ(r->input[0].role, "system");
  EXPECT_EQ(r->input[1].content, "Weather?");
  // The calls join the assistant message before them, arguments parsed.
  const Json assistant = Json::parse(r->input[2].json);
  EXPECT_EQ(assistant["content"], "Let me see.");
  ASSERT_EQ(assistant["tool_calls"].size(), 2u);
  EXPECT_EQ(assistant["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(assistant["tool_calls"][0]["function"]["arguments"], Json({{"city", "Paris"}}));
  EXPECT_EQ(Json::parse(r->input[3].json),
            Json({{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}}));
  EXPECT_EQ(Json::parse(r->tools_json)[0]["function"]["name"], "w");
  EXPECT_EQ(r->instructions, "");
  EXPECT_EQ(r->max_output_tokens, 9);
  EXPECT_FALSE(r->store);
}

TEST(ResponsesRequestTest, RefusalsNameTheirField) {
  EXPECT_EQ(ParamOf(Parse(R"("input": [])")), "input");
  EXPECT_EQ(ParamOf(Parse(R"("input": [{"role": "user", "content": [{"type": "input_image"}]}])")),
            "input[0].content[0].type");
  EXPECT_EQ(ParamOf(Parse(R"("input": [{"role": "robot", "content": "x"}])")), "input[0].role");
  EXPECT_EQ(ParamOf(Parse(R"("input": [{"type": "reasoning", "summary": []}])")), "input[0].type");
  EXPECT_EQ(ParamOf(Parse(R"("input": [{"type": "function_call", "call_id": "c", "name": "w",
                                         "arguments": "{"}])")),
            "input[0].arguments");
  EXPECT_EQ(ParamOf(Parse(R"("input": [{"type": "function_call_output", "call_id": "c"}])")),
            "input[0].output");
  EXPECT_EQ(ParamOf(Parse(R"("input": "x", "tools": [{"type": "file_search"}])")), "tools[0].type");
  EXPECT_EQ(ParamOf(Parse(R"("input": "x", "tools": [{"type": "function", "name": "a b"}])")),
            "tools[0].name");
  EXPECT_EQ(ParamOf(Parse(R"("input": "x", "tool_choice": "required")")), "tool_choice");
  EXPECT_EQ(ParamOf(Parse(R"("input": "x", "text": {"format": {"type": "xml"}})")),
            "text.format.type");
  EXPECT_EQ(ParamOf(Parse(R"("input": "x", "text": {"verbosity": "low"})")), "text.verbosity");
  EXPECT_EQ(
      ParamOf(Parse(R"("input": "x", "text": {"format": {"type": "json_schema", "name": "n"}})")),
      "text.format.schema");
  EXPECT_EQ(ParamOf(Parse(R"("input": "x", "truncation": "auto")")), "truncation");
  EXPECT_EQ(ParamOf(Parse(R"("input": "x", "background": true)")), "background");
  EXPECT_EQ(ParamOf(Parse(R"("input": "x", "include": ["file_search_call.results"])")), "include");
  EXPECT_EQ(ParamOf(Parse(R"("input": "x", "metadata": {"k": 1})")), "metadata.k");
  EXPECT_EQ(ParamOf(Parse(R"("input": "x", "temperature": 3)")), "temperature");
  EXPECT_EQ(ParamOf(Parse(R"("input": "x", "n": 2)")), "n");
  // What asks for nothing more than served is taken.
  EXPECT_TRUE(Parse(R"("input": "x", "text": {"format": {"type": "text"}}, "truncation":
                    "disabled", "include": [], "reasoning": {}, "background": false,
                    "stream_options": {"include_obfuscation": false}, "service_tier": "auto")")
                  .ok());
}

// Qwen 2.5's real template over a bytes tokenizer: a turn after a stored
// reply starts with that reply's state tokens.
class ResponsesTurnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ifstream in(std::string(ATTN_SOURCE_DIR) + "/tests/data/chat_templates/qwen2.5.jinja");
    std::stringstream text;
    text << in.rdbuf();
    ChatTemplateConfig config;
    config.templates["default"] = text.str();
    template_ = *ChatTemplate::Create(config);
    tokenizer_ = std::make_unique<Tokenizer>(*Tokenizer::Bytes(257, 256));
    target_.tokenizer = tokenizer_.get();
    target_.chat_template = template_.get();
    target_.chat_stop_ids = {256};
  }
  ResponsesTurn Turn(const std::string& fields, const Conversation* previous,
                     const std::string& fingerprint = "f") {
    auto r = Parse(fields);
    EXPECT_TRUE(r.ok()) << r.status();
    auto turn = ToResponsesTurn(*r, previous, target_, "m", fingerprint, absl::InfiniteFuture());
    EXPECT_TRUE(turn.ok()) << turn.status();
    return *std::move(turn);
  }
  std::string Render(const std::vector<ChatMessage>& messages) {
    return *template_->Render(messages, true);
  }

  std::shared_ptr<const ChatTemplate> template_;
  std::unique_ptr<Tokenizer> tokenizer_;
  RequestTarget target_;
};

TEST_F(ResponsesTurnTest, ATurnContinuesThePreviousRepliesState) {
  ResponsesTurn first = Turn(R"("input": "Hi", "instructions": "Be brief.")", nullptr);
  const std::string prompt = Render({{"system", "Be brief."}, {"user", "Hi"}});
  EXPECT_EQ(first.request.prompt, tokenizer_->Encode(prompt));
  EXPECT_EQ(first.request.stop_token_ids, std::vector<int64_t>{256});
  // The next turn continues from the cache: the engine names the state's
  // tokens, and the state itself never leaves it.
  EXPECT_TRUE(first.request.return_state_tokens);
  EXPECT_FALSE(first.request.return_state);

  // The engine's state after the reply and its end token.
  std::vector<int64_t> state = first.request.prompt;
  for (char c : std::string("Hello.")) state.push_back(static_cast<unsigned char>(c));
  state.push_back(256);
  Conversation stored = first.conversation;
  EndTurn(*tokenizer_, {"assistant", "Hello."}, state, &stored);
  EXPECT_EQ(stored.text, prompt + "Hello.");
  auto round_trip = Conversation::FromJson(Json::parse(stored.ToJson().dump()));
  ASSERT_TRUE(round_trip.ok()) << round_trip.status();
  EXPECT_EQ(round_trip->tokens, stored.tokens);
  EXPECT_EQ(round_trip->messages.size(), 2u);

  ResponsesTurn second = Turn(R"("input": "More", "instructions": "Be brief.")", &*round_trip);
  const std::string whole =
      Render({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "More"}});
  ASSERT_EQ(whole.substr(0, stored.text.size()), stored.text);
  std::vector<int64_t> expected = state;
  for (int64_t id : tokenizer_->Encode(whole.substr(stored.text.size()))) expected.push_back(id);
  EXPECT_EQ(second.request.prompt, expected);
  EXPECT_EQ(second.conversation.text, whole);

  // Other instructions, or another model's tokens: the whole conversation
  // again.
  ResponsesTurn other = Turn(R"("input": "More", "instructions": "Be long.")", &*round_trip);
  EXPECT_EQ(
      other.request.prompt,
      tokenizer_->Encode(Render(
          {{"system", "Be long."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "More"}})));
  ResponsesTurn moved = Turn(R"("input": "More", "instructions": "Be brief.")", &*round_trip, "g");
  EXPECT_EQ(moved.request.prompt, tokenizer_->Encode(whole));
}

TEST_F(ResponsesTurnTest, LimitsNameTheTurnsFields) {
  target_.limits.max_tokens = 8;
  auto r = Parse(R"("input": "Hi", "max_output_tokens": 9)");
  ASSERT_TRUE(r.ok());
  auto turn = ToResponsesTurn(*r, nullptr, target_, "m", "f", absl::InfiniteFuture());
  EXPECT_EQ(FieldOf(turn.status()), "max_output_tokens");
  target_.limits.max_prompt_tokens = 4;
  auto long_input = ToResponsesTurn(*Parse(R"("input": "Hi")"), nullptr, target_, "m", "f",
                                    absl::InfiniteFuture());
  EXPECT_EQ(FieldOf(long_input.status()), "input");
}

StreamEvent Piece(const std::string& text, bool last = false) {
  StreamEvent event;
  event.text = text;
  event.last = last;
  if (last) {
    event.finish_reason = FinishReason::kEos;
    event.prompt_tokens = 10;
    event.completion_tokens = 5;
    event.cached_tokens = 4;
  }
  return event;
}

TEST(ResponsesEventsTest, AStreamedToolCallIsTheWholeResponsesCall) {
  ResponsesRequest request =
      *Parse(R"("input": "x", "tools": [{"type": "function", "name": "w"}])");
  ResponsesContext context = NewResponsesContext(request, "m", ToolCallFormat::kHermes);
  Json stored;
  ChatMessage reply;
  ResponsesEvents events(context, [&](const Json& response, const StreamEvent&, ChatMessage m) {
    stored = response;
    reply = std::move(m);
  });
  std::string sse = events.Begin();
  for (const char* piece :
       {"\n<tool_", "call>\n{\"name\": \"w\", \"arguments\": {\"a\": 1}}", "\n</tool_call>"}) {
    sse += events.Event(0, Piece(piece));
  }
  sse += events.Event(0, Piece("", true));
  sse += events.Done();
  std::vector<std::string> types;
  std::istringstream lines(sse);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: ", 0) == 0) {
      const Json event = Json::parse(line.substr(6));
      EXPECT_EQ(event["sequence_number"], types.size());
      types.push_back(event["type"]);
    }
  }
  EXPECT_EQ(types,
            (std::vector<std::string>{
                "response.created", "response.in_progress", "response.output_item.added",
                "response.function_call_arguments.delta", "response.function_call_arguments.done",
                "response.output_item.done", "response.completed"}));
  // The blank text before the call made no message: as a whole reply's.
  const Json whole = OutputItems(
      context, "\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"a\": 1}}\n</tool_call>");
  ASSERT_EQ(stored["output"].size(), 1u);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(stored["output"][0]["type"], whole[0]["type"]);
  EXPECT_EQ(stored["output"][0]["arguments"], whole[0]["arguments"]);
  EXPECT_EQ(stored["status"], "completed");
  EXPECT_EQ(stored["usage"]["input_tokens_details"]["cached_tokens"], 4);
  EXPECT_EQ(stored["usage"]["total_tokens"], 15);
  const Json message = Json::parse(reply.json);
  EXPECT_EQ(message["tool_calls"][0]["id"], stored["output"][0]["call_id"]);
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], Json({{"a", 1}}));
}

// A clock the store's thread may read while the test moves it.
class SharedClock : public Clock {
 public:
  absl::Time Now() const override { return absl::UnixEpoch() + absl::Nanoseconds(ns_.load()); }
  void Advance(absl::Duration d) { ns_ += absl::ToInt64Nanoseconds(d); }

 private:
  std::atomic<int64_t> ns_{0};
};

class CountingObserver : public ResponseStoreObserver {
 public:
  void OnSize(int64_t records, int64_t bytes) override {
    records_ = records;
    bytes_ = bytes;
  }
  void OnRemoved(Removal why, int64_t records) override {
    removed_[static_cast<int>(why)] += records;
  }
  std::atomic<int64_t> records_{0}, bytes_{0};
  std::atomic<int64_t> removed_[3] = {};
};

absl::StatusOr<std::string> Get(ResponseStore& store, const std::string& id) {
  absl::StatusOr<std::string> out;
  absl::Notification done;
  store.Get(id, [&](absl::StatusOr<std::string> record) {
    out = std::move(record);
    done.Notify();
  });
  done.WaitForNotification();
  return out;
}

TEST(ResponseStoreTest, RecordsExpireAreBoundedAndDeleted) {
  SharedClock clock;
  CountingObserver observer;
  ResponseStoreOptions options;
  options.ttl = absl::Minutes(10);
  options.capacity_bytes = 100;
  options.clock = &clock;
  auto store = ResponseStore::Start(options, &observer);
  ASSERT_TRUE(store.ok()) << store.status();
  ResponseStore& s = **store;
  s.Put("a", std::string(40, 'a'));
  clock.Advance(absl::Minutes(5));
  s.Put("b", std::string(40, 'b'));
  EXPECT_EQ(*Get(s, "a"), std::string(40, 'a'));
  EXPECT_EQ(observer.records_, 2);
  EXPECT_EQ(observer.bytes_, 82);
  // Past the bound the oldest goes first.
  s.Put("c", std::string(40, 'c'));
  EXPECT_EQ(Get(s, "a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(observer.removed_[static_cast<int>(ResponseStoreObserver::Removal::kEvicted)], 1);
  // Ten minutes after b and c were stored, both are gone.
  clock.Advance(absl::Minutes(10) - absl::Nanoseconds(1));
  EXPECT_TRUE(Get(s, "b").ok());
  clock.Advance(absl::Nanoseconds(1));
  EXPECT_EQ(Get(s, "b").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(observer.removed_[static_cast<int>(ResponseStoreObserver::Removal::kExpired)], 2);
  EXPECT_EQ(observer.records_, 0);
  s.Put("d", "d");
  absl::Notification deleted;
  s.Delete("d", [&](absl::StatusOr<bool> found) {
    EXPECT_TRUE(found.ok() && *found);
    deleted.Notify();
  });
  deleted.WaitForNotification();
  EXPECT_EQ(observer.removed_[static_cast<int>(ResponseStoreObserver::Removal::kDeleted)], 1);
  EXPECT_EQ(observer.records_, 0);
  EXPECT_EQ(observer.bytes_, 0);
  EXPECT_EQ(FieldOf(Get(s, "d").status()), "id");
  // Options out of range name their flags.
  options.ttl = absl::ZeroDuration();
  EXPECT_EQ(FieldOf(ResponseStore::Start(options, nullptr).status()), "response_ttl");
}

}  // namespace
}  // namespace attn::serving::http
