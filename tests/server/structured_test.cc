// Structured output's request side (server/core/structured.h): forced tool
// calls in every JSON tool-call format agree with the readers of
// model/text/tool_calls.h, and errors name the field a client wrote.
#include "server/core/structured.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "model/grammar/matcher.h"
#include "util/field_error.h"

namespace attn::serving {
namespace {

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "noop"}}])";

bool Accepts(const grammar::Grammar& g, const std::string& text) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  grammar::GrammarMatcher m(std::make_shared<const grammar::Grammar>(g),
                            std::make_shared<const grammar::TokenTrie>(bytes));
  return m.Accept(text) && m.CanEnd();
}

std::shared_ptr<const grammar::Grammar> Forced(ToolCallFormat format, const std::string& name,
                                               bool parallel) {
  auto c = ToolCallConstraint(format, kTools, name, parallel);
  EXPECT_TRUE(c.ok()) << c.status();
  auto g = CompileConstraint(*c);
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

TEST(ToolCallConstraint, EachFormatsCallsParseBack) {
  struct Case {
    ToolCallFormat format;
    std::string one, two;  // one call; two calls
  } cases[] = {
      {ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": "
       "3}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
       "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"},
      {ToolCallFormat::kLlama3Json,
       R"({"name": "get_weather", "parameters": {"city": "Paris", "days": 3}})",
       R"({"name": "noop", "parameters": {}}; {"name": "get_weather", "parameters": {"city": "Oslo"}})"},
      {ToolCallFormat::kMistral,
       R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}])",
       R"([TOOL_CALLS][{"name": "noop", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "Oslo"}}])"},
      {ToolCallFormat::kGranite,
       R"(<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}])",
       R"(<|tool_call|>[{"name": "noop", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "Oslo"}}])"},
  };
  for (const auto& c : cases) {
    const std::string format = ToolCallFormatName(c.format);
    auto any = Forced(c.format, "", true);
    auto single = Forced(c.format, "", false);
    auto named = Forced(c.format, "noop", true);
    EXPECT_TRUE(Accepts(*any, c.one)) << format;
    EXPECT_TRUE(Accepts(*any, c.two)) << format;
    EXPECT_TRUE(Accepts(*single, c.one)) << format;
    EXPECT_FALSE(Accepts(*single, c.two)) << format;
    EXPECT_FALSE(Accepts(*named, c.one)) << format;  // get_weather is not noop
    EXPECT_FALSE(Accepts(*any, "I will not call anything.")) << format;
    // What the grammar lets through, the format's reader reads as calls.
    const ToolCallText one = ParseToolCalls(c.format, c.one);
    ASSERT_EQ(one.calls.size(), 1u) << format;
    EXPECT_EQ(one.calls[0].name, "get_weather");
    EXPECT_EQ(one.calls[0].arguments, R"({"city":"Paris","days":3})");
    EXPECT_EQ(ParseToolCalls(c.format, c.two).calls.size(), 2u) << format;
  }
  auto hermes = Forced(ToolCallFormat::kHermes, "", true);
  // Arguments follow the function's parameters.
  EXPECT_FALSE(Accepts(*hermes,
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                       "{\"city\": \"Paris\", \"days\": 9}}\n</tool_call>"));
  EXPECT_FALSE(Accepts(*hermes,
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                       "{\"days\": 2}}\n</tool_call>"));
}

TEST(ToolCallConstraint, RefusalsNameTheirField) {
  auto lfm = ToolCallConstraint(ToolCallFormat::kLfm2, kTools, "", true);
  EXPECT_EQ(FieldOf(lfm.status()), "tool_choice");
  auto missing = ToolCallConstraint(ToolCallFormat::kHermes, kTools, "nope", true);
  EXPECT_EQ(FieldOf(missing.status()), "tool_choice");
  auto bad = ToolCallConstraint(
      ToolCallFormat::kHermes,
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
          "properties": {"x": {"type": "string", "not": {"pattern": "a"}}}}}}])",
      "", true);
  EXPECT_EQ(FieldOf(bad.status()), "tools[0].function.parameters.properties.x.not.pattern");
  ToolForcing forcing;
  forcing.forced = true;
  forcing.tools_json = kTools;
  RequestConstraint json{grammar::OutputConstraint::JsonObject(), "response_format"};
  EXPECT_EQ(FieldOf(OutputGrammar(json, forcing).status()), "tool_choice");
}

}  // namespace
}  // namespace attn::serving
