#include "server/core/validation.h"

#include <gtest/gtest.h>

#include <functional>

#include "absl/strings/match.h"
#include "tests/tiny_model.h"

namespace attn::serving {
namespace {

using attn::testing::TinyTokenizer;

struct Case {
  const char* name;
  std::function<void(attn::v1::GenerateRequest*)> edit;
  const char* field;  // the message must start with it
};

TEST(ValidationTest, EachBadFieldIsInvalidArgumentNamingIt) {
  const Case cases[] = {
      {"empty prompt", [](auto* r) { r->set_prompt(""); }, "prompt:"},
      {"invalid UTF-8", [](auto* r) { r->set_prompt("ok \xC3("); }, "prompt:"},
      {"both prompts", [](auto* r) { r->add_prompt_token_ids(5); }, "prompt, prompt_token_ids:"},
      {"unknown id",
       [](auto* r) {
         r->clear_prompt();
         r->add_prompt_token_ids(5);
         r->add_prompt_token_ids(100000);
       },
       "prompt_token_ids[1]:"},
      {"negative id",
       [](auto* r) {
         r->clear_prompt();
         r->add_prompt_token_ids(-1);
       },
       "prompt_token_ids[0]:"},
      {"max_tokens 0", [](auto* r) { r->set_max_tokens(0); }, "max_tokens:"},
      {"max_tokens over", [](auto* r) { r->set_max_tokens(5000); }, "max_tokens:"},
      {"negative temperature", [](auto* r) { r->set_temperature(-0.5f); }, "temperature"},
      {"top_p 0", [](auto* r) { r->set_top_p(0.0f); }, "top_p"},
      {"top_p over 1", [](auto* r) { r->set_top_p(1.01f); }, "top_p"},
      {"negative top_k", [](auto* r) { r->set_top_k(-3); }, "top_k"},
      {"penalty 0", [](auto* r) { r->set_repetition_penalty(0.0f); }, "repetition_penalty"},
      {"empty stop", [](auto* r) { r->add_stop("ok"), r->add_stop(""); }, "stop[1]:"},
      {"prompt too long", [](auto* r) { r->set_prompt(std::string(20000, 'a') + " b"); },
       "prompt:"},
  };
  RequestLimits limits;
  limits.max_prompt_tokens = 1000;
  limits.max_tokens = 4096;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    attn::v1::GenerateRequest request;
    request.set_prompt("the river keeps");
    c.edit(&request);
    auto result = ToEngineRequest(request, TinyTokenizer(), limits, absl::InfiniteFuture());
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StartsWith(result.status().message(), c.field)) << result.status();
  }
}

TEST(ValidationTest, DefaultsAndContextLimit) {
  RequestLimits limits;
  limits.default_max_tokens = 7;
  limits.max_context = 30;
  attn::v1::GenerateRequest request;
  request.set_prompt("the river keeps");
  auto ok = ToEngineRequest(request, TinyTokenizer(), limits, absl::InfiniteFuture());
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->max_tokens, 7);
  EXPECT_EQ(ok->sampling.temperature, 1.0);
  EXPECT_EQ(ok->sampling.top_p, 1.0);
  request.set_max_tokens(19);  // the prompt (14 tokens) + 19 > 30
  auto too_long = ToEngineRequest(request, TinyTokenizer(), limits, absl::InfiniteFuture());
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(too_long.status().message(), "context")) << too_long.status();
}

TEST(ValidationTest, ScoreNeedsTwoTokens) {
  attn::v1::ScoreRequest request;
  request.add_token_ids(5);
  auto result = ToScoreRequest(request, TinyTokenizer(), RequestLimits(), absl::InfiniteFuture());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  request.add_token_ids(6);
  EXPECT_TRUE(
      ToScoreRequest(request, TinyTokenizer(), RequestLimits(), absl::InfiniteFuture()).ok());
}

}  // namespace
}  // namespace attn::serving
