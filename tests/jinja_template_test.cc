// The Jinja interpreter's contract beyond what Jinja2 comparisons show
// (tests/text/chat_templates_agree.sh checks the rendering itself): errors
// name the template's line, unsupported constructs are refused when the
// template is parsed, and hostile templates hit a limit instead of hanging
// or exhausting memory.
#include <gtest/gtest.h>

#include <string>

#include "model/jinja/template.h"
#include "nlohmann/json.hpp"

namespace attn::jinja {
namespace {

absl::StatusOr<std::string> Render(const std::string& source, const nlohmann::ordered_json& vars,
                                   const RenderOptions& options = {}) {
  auto tmpl = Template::Parse(source);
  if (!tmpl.ok()) return tmpl.status();
  return tmpl->Render(vars, options);
}

TEST(JinjaTemplateTest, RendersMessages) {
  nlohmann::ordered_json vars = {
      {"messages",
       {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Yo"}}}},
      {"add_generation_prompt", true}};
  auto text = Render(
      "{% for m in messages %}<|{{ m.role }}|>{{ m['content'] | trim }}\n{% endfor %}"
      "{% if add_generation_prompt %}<|assistant|>{% endif %}",
      vars);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "<|user|>Hi\n<|assistant|>Yo\n<|assistant|>");
}

TEST(JinjaTemplateTest, SyntaxErrorsNameTheLine) {
  auto bad = Template::Parse("line one\n{% if x %}\n{{ x + }}\n{% endif %}");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find("line 3"), std::string::npos) << bad.status();
  auto unclosed = Template::Parse("{% for x in y %}\n{{ x }}");
  ASSERT_FALSE(unclosed.ok());
  EXPECT_NE(std::string(unclosed.status().message()).find("endfor"), std::string::npos);
  auto unsupported = Template::Parse("ok\n\n{% include 'other.jinja' %}");
  ASSERT_FALSE(unsupported.ok());
  EXPECT_NE(std::string(unsupported.status().message()).find("line 3"), std::string::npos);
  EXPECT_NE(std::string(unsupported.status().message()).find("include"), std::string::npos);
  EXPECT_FALSE(Template::Parse("{{ 'unterminated }}").ok());
  EXPECT_FALSE(Template::Parse("{# never closed").ok());
  EXPECT_FALSE(Template::Parse("{{ x | }}").ok());
}

TEST(JinjaTemplateTest, RuntimeErrorsNameTheLineAndCarryRaiseException) {
  auto raised = Render("a\nb\n{{ raise_exception('Roles must alternate') }}",
                       nlohmann::ordered_json::object());
  ASSERT_FALSE(raised.ok());
  EXPECT_EQ(raised.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(raised.status().message(), "line 3: Roles must alternate");
  auto undefined = Render("\n{{ nothing.here }}", nlohmann::ordered_json::object());
  ASSERT_FALSE(undefined.ok());
  EXPECT_EQ(undefined.status().message(), "line 2: 'nothing' is undefined");
  EXPECT_FALSE(Render("{{ 1 / 0 }}", nlohmann::ordered_json::object()).ok());
  EXPECT_FALSE(Render("{{ x }}", nlohmann::ordered_json::array()).ok());
}

TEST(JinjaTemplateTest, LoopsAreBounded) {
  RenderOptions options;
  options.limits.max_steps = 100000;
  auto text = Render(
      "{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}"
      "{% endfor %}{% endfor %}{% endfor %}",
      nlohmann::ordered_json::object(), options);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kResourceExhausted) << text.status();
  // One range() that large is refused before it is built.
  auto huge =
      Render("{{ range(1000000000000) | length }}", nlohmann::ordered_json::object(), options);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
}

TEST(JinjaTemplateTest, RecursionIsBounded) {
  auto text = Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
                     nlohmann::ordered_json::object());
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kResourceExhausted) << text.status();
  // Deeply nested source is refused when parsed, not by overflowing the stack.
  EXPECT_FALSE(
      Template::Parse("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").ok());
  std::string nested;
  for (int i = 0; i < 5000; ++i) nested += "{% if true %}";
  EXPECT_FALSE(Template::Parse(nested).ok());
}

TEST(JinjaTemplateTest, OutputIsBounded) {
  RenderOptions options;
  options.limits.max_output_bytes = 1 << 16;
  auto doubling = Render(
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}{{ ns.s | length }}",
      nlohmann::ordered_json::object(), options);
  ASSERT_FALSE(doubling.ok());
  EXPECT_EQ(doubling.status().code(), absl::StatusCode::kResourceExhausted) << doubling.status();
  auto wide = Render("{% for i in range(100000) %}0123456789{% endfor %}",
                     nlohmann::ordered_json::object(), options);
  EXPECT_EQ(wide.status().code(), absl::StatusCode::kResourceExhausted) << wide.status();
}

TEST(JinjaTemplateTest, StrftimeNowReadsTheGivenClock) {
  RenderOptions options;
  options.strftime_now = [](const std::string& format) { return "[" + format + "]"; };
  auto text = Render("{{ strftime_now('%d %b %Y') }}", nlohmann::ordered_json::object(), options);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "[%d %b %Y]");
  auto now = Render("{{ strftime_now('%Y') | length }}", nlohmann::ordered_json::object());
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(*now, "4");
}

TEST(JinjaTemplateTest, OneTemplateRendersManyTimes) {
  auto tmpl = Template::Parse("{% set n = n + 1 %}{{ n }}");
  ASSERT_TRUE(tmpl.ok());
  for (int i = 0; i < 3; ++i) {
    auto text = tmpl->Render({{"n", i}});
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(*text, std::to_string(i + 1));
  }
}

}  // namespace
}  // namespace attn::jinja
