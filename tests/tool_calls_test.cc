// Tool calls read from replies in each format (model/text/tool_calls.h):
// whole and streamed in every split, text around them kept, and text that
// is not a well-formed call left as content.
#include "model/text/tool_calls.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace attn {
namespace {

struct Case {
  ToolCallFormat format;
  std::string reply;
  std::string content;
  std::vector<ToolCall> calls;
};

std::vector<Case> Cases() {
  using F = ToolCallFormat;
  return {
      {F::kHermes,
       "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Paris\"}}\n</tool_call>",
       "Let me check.\n",
       {{"get_weather", R"({"city":"Paris"})"}}},
      {F::kHermes,
       "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"b\", "
       "\"arguments\": {\"x\": [1, 2.5, null]}}</tool_call>",
       "\n",
       {{"a", "{}"}, {"b", R"({"x":[1,2.5,null]})"}}},
      {F::kHermes,
       "<tool_call>{not json}</tool_call> tail",
       "<tool_call>{not json}</tool_call> tail",
       {}},
      {F::kHermes, "no calls <tool at all", "no calls <tool at all", {}},
      {F::kHermes,
       "<tool_call>{\"name\": \"cut\", \"arguments\": {\"a\": 1}}",  // stopped at eos
       "",
       {{"cut", R"({"a":1})"}}},
      {F::kLlama3Json,
       "{\"name\": \"search\", \"parameters\": {\"query\": \"rwkv\"}}",
       "",
       {{"search", R"({"query":"rwkv"})"}}},
      {F::kLlama3Json,
       "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": "
       "\"{\\\"k\\\": 2}\"}",
       "",
       {{"a", "{}"}, {"b", R"({"k":2})"}}},
      {F::kLlama3Json, "{braces in prose}", "{braces in prose}", {}},
      {F::kLlama3Json, "The answer is 4.", "The answer is 4.", {}},
      {F::kLfm2,
       "Sure.<|tool_call_start|>[get_weather(city=\"Paris\", days=3, hourly=True), "
       "search(query='a \\'b\\'', opts={\"n\": [1, None]})]<|tool_call_end|>Done.",
       "Sure.Done.",
       {{"get_weather", R"({"city":"Paris","days":3,"hourly":true})"},
        {"search", R"({"query":"a 'b'","opts":{"n":[1,null]}})"}}},
      {F::kLfm2,
       "<|tool_call_start|>[broken(]<|tool_call_end|>",
       "<|tool_call_start|>[broken(]<|tool_call_end|>",
       {}},
      {F::kMistral,
       "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": \"y\"}}]",
       "",
       {{"a", R"({"x":"y"})"}}},
      {F::kMistral,
       "[TOOL_CALLS]a[ARGS]{\"x\": 1}[TOOL_CALLS]b[ARGS]{}",
       "",
       {{"a", R"({"x":1})"}, {"b", "{}"}}},
      {F::kGranite,
       "<|tool_call|>[{\"name\": \"g\", \"arguments\": {\"q\": true}}]",
       "",
       {{"g", R"({"q":true})"}}},
      {F::kNone,
       "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>",
       "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>",
       {}},
  };
}

TEST(ToolCallsTest, WholeReplies) {
  for (const Case& c : Cases()) {
    ToolCallText parsed = ParseToolCalls(c.format, c.reply);
    EXPECT_EQ(parsed.content, c.content) << ToolCallFormatName(c.format) << ": " << c.reply;
    EXPECT_EQ(parsed.calls, c.calls) << ToolCallFormatName(c.format) << ": " << c.reply;
  }
}

// Streamed in pieces of every size, the released text and calls add up to
// the whole reply's, and no piece of a call is released as content.
TEST(ToolCallsTest, StreamedInEverySplit) {
  for (const Case& c : Cases()) {
    for (size_t piece = 1; piece <= c.reply.size(); ++piece) {
      ToolCallStream stream(c.format);
      ToolCallText total;
      for (size_t at = 0; at < c.reply.size(); at += piece) {
        ToolCallText part = stream.Push(c.reply.substr(at, piece));
        total.content += part.content;
        total.calls.insert(total.calls.end(), part.calls.begin(), part.calls.end());
        if (!c.calls.empty() && c.content.empty()) {
          EXPECT_EQ(total.content, "") << "released part of a call: " << c.reply;
        }
      }
      ToolCallText rest = stream.Finish();
      total.content += rest.content;
      total.calls.insert(total.calls.end(), rest.calls.begin(), rest.calls.end());
      ASSERT_EQ(total.content, c.content) << "piece " << piece << ": " << c.reply;
      ASSERT_EQ(total.calls, c.calls) << "piece " << piece << ": " << c.reply;
    }
  }
}

TEST(ToolCallsTest, PlainTextStreamsWithoutDelay) {
  ToolCallStream stream(ToolCallFormat::kHermes);
  EXPECT_EQ(stream.Push("Hello wor").content, "Hello wor");
  EXPECT_EQ(stream.Push("ld <tool").content, "ld ");  // "<tool" may start a call
  EXPECT_EQ(stream.Push("s are nice").content, "<tools are nice");
  ToolCallStream json(ToolCallFormat::kLlama3Json);
  EXPECT_EQ(json.Push("The").content, "The");
}

// The built-in formats' chat with tools: the tools at the end of the system
// turn, calls after the assistant's text, results in one user turn; what
// the model is shown of a call reads back as that call.
TEST(ToolCallsTest, HermesToolTurnsForBuiltInFormats) {
  ChatMessage call{"assistant", "Let me look."};
  call.json = R"({"role": "assistant", "content": "Let me look.", "tool_calls": [
      {"id": "c1", "type": "function", "function": {"name": "w", "arguments": {"city": "Paris"}}},
      {"id": "c2", "type": "function", "function": {"name": "w", "arguments": {"city": "Oslo"}}}]})";
  std::vector<ChatMessage> turns =
      HermesToolTurns({{"system", "Be brief."},
                       {"user", "Weather?"},
                       call,
                       {"tool", "21 C"},
                       {"tool", "3 C"},
                       {"assistant", "Warm and cold."}},
                      R"([{"type": "function", "function": {"name": "w"}}])");
  ASSERT_EQ(turns.size(), 5u);
  EXPECT_EQ(turns[0].role, "system");
  EXPECT_EQ(turns[0].content.rfind("Be brief.\n\n# Tools", 0), 0u) << turns[0].content;
  EXPECT_NE(turns[0].content.find(R"({"type":"function","function":{"name":"w"}})"),
            std::string::npos);
  EXPECT_EQ(turns[2].role, "assistant");
  ToolCallText read = ParseToolCalls(ToolCallFormat::kHermes, turns[2].content);
  EXPECT_EQ(read.content, "Let me look.\n\n");  // the text and what separates the calls
  ASSERT_EQ(read.calls.size(), 2u);
  EXPECT_EQ(read.calls[1], (ToolCall{"w", R"({"city":"Oslo"})"}));
  EXPECT_EQ(turns[3].role, "user");
  EXPECT_EQ(turns[3].content,
            "<tool_response>\n21 C\n</tool_response>\n<tool_response>\n3 C\n</tool_response>");
  EXPECT_EQ(turns[4].content, "Warm and cold.");
  // Without tools and tool turns nothing changes.
  std::vector<ChatMessage> plain = HermesToolTurns({{"user", "hi"}}, "");
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].content, "hi");
}

TEST(ToolCallsTest, FormatNames) {
  for (const char* name : {"hermes", "llama3-json", "lfm2", "mistral", "granite"}) {
    ToolCallFormat format;
    ASSERT_TRUE(ParseToolCallFormat(name, &format)) << name;
    EXPECT_EQ(ToolCallFormatName(format), name);
  }
}

}  // namespace
}  // namespace attn
