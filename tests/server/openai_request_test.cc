// OpenAI requests parsed field by field (server/http/openai_request.h) and
// the response objects and errors built from the engine's events
// (server/http/openai_response.h).
#include "server/http/openai_request.h"

#include <gtest/gtest.h>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "server/http/openai_response.h"
#include "tests/tiny_tokenizer.h"
#include "util/field_error.h"

namespace attn::serving::http {
namespace {

using Json = nlohmann::ordered_json;

absl::StatusOr<OpenAiRequest> Chat(const std::string& fields) {
  return ParseOpenAiRequest(ApiKind::kChat,
                            "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]" +
                                (fields.empty() ? "" : ", " + fields) + "}");
}
absl::StatusOr<OpenAiRequest> Completion(const std::string& fields) {
  return ParseOpenAiRequest(ApiKind::kCompletions,
                            "{\"prompt\": \"hi\"" + (fields.empty() ? "" : ", " + fields) + "}");
}

// The field an error names: what the error object's `param` carries.
std::string ParamOf(const absl::StatusOr<OpenAiRequest>& r) {
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  const Json error = ErrorObject(r.status())["error"];
  return error["param"].is_null() ? "(null)" : error["param"].get<std::string>();
}

TEST(OpenAiRequestTest, EveryChatFieldIsRead) {
  auto r = ParseOpenAiRequest(ApiKind::kChat, R"({
      "model": "m", "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9, "n": 3,
      "stop": ["a", "b"], "stream": true, "stream_options": {"include_usage": true},
      "logprobs": true, "top_logprobs": 4, "seed": 11, "user": "u",
      "presence_penalty": 0.5, "frequency_penalty": -0.5, "logit_bias": {"5": -100, "7": 2.5},
      "response_format": {"type": "text"},
      "messages": [{"role": "developer", "content": "be brief"},
                   {"role": "user", "content": [{"type": "text", "text": "he"},
                                                {"type": "text", "text": "llo"}]},
                   {"role": "assistant", "content": "hi", "name": "bot"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(*r->max_tokens, 7);
  EXPECT_DOUBLE_EQ(r->temperature, 0.5);
  EXPECT_DOUBLE_EQ(r->top_p, 0.9);
  EXPECT_EQ(r->n, 3);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r->stream && r->include_usage && r->logprobs);
  EXPECT_EQ(r->top_logprobs, 4);
  EXPECT_EQ(*r->seed, 11u);
  EXPECT_DOUBLE_EQ(r->presence_penalty, 0.5);
  EXPECT_DOUBLE_EQ(r->frequency_penalty, -0.5);
  ASSERT_EQ(r->logit_bias.size(), 2u);
  EXPECT_EQ(r->logit_bias[0], std::make_pair(int64_t{5}, -100.0f));
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[0].role, "system");  // developer is OpenAI's newer name
  EXPECT_EQ(r->messages[1].content, "hello");
  EXPECT_EQ(r->messages[2].role, "assistant");
}

TEST(OpenAiRequestTest, CompletionPromptsAndLogprobs) {
  auto text = Completion("\"logprobs\": 3, \"stop\": \"x\", \"max_tokens\": 2");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text->prompt_text, "hi");
  EXPECT_TRUE(text->logprobs);
  EXPECT_EQ(text->top_logprobs, 3);
  EXPECT_EQ(text->stop, std::vector<std::string>{"x"});
  auto ids = ParseOpenAiRequest(ApiKind::kCompletions, R"({"prompt": [1, 2, 3], "logprobs": 0})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_FALSE(ids->prompt_text.has_value());
  EXPECT_EQ(ids->prompt_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(ids->logprobs);
  EXPECT_EQ(ids->top_logprobs, 0);
  auto none = Completion("\"logprobs\": null, \"echo\": false, \"best_of\": 1, \"suffix\": \"\"");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->logprobs);
}

TEST(OpenAiRequestTest, StructuredOutputIsReadAndCheckedByField) {
  auto schema = Chat(R"("response_format": {"type": "json_schema", "json_schema": {
      "name": "n", "strict": true, "schema": {"type": "object"}}})");
  ASSERT_TRUE(schema.ok()) << schema.status();
  EXPECT_EQ(schema->constraint.constraint.kind, grammar::OutputConstraint::Kind::kJsonSchema);
  EXPECT_EQ(schema->constraint.field, "response_format.json_schema.schema");
  auto object = Completion(R"("attn_response_format": {"type": "json_object"})");
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(object->constraint.constraint.kind, grammar::OutputConstraint::Kind::kJsonObject);
  auto choice = Completion(R"("attn_structured": {"choice": ["a", "b"]})");
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->constraint.constraint.choices, (std::vector<std::string>{"a", "b"}));
  auto text = Chat(R"("response_format": {"type": "text"})");
  ASSERT_TRUE(text.ok());
  EXPECT_FALSE(text->constraint.active());
  EXPECT_EQ(ParamOf(Chat(R"("response_format": {"type": "json_schema"})")),
            "response_format.json_schema");
  EXPECT_EQ(
      ParamOf(Chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "n"}})")),
      "response_format.json_schema.schema");
  EXPECT_EQ(
      ParamOf(Chat(
          R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}, "x": 1}})")),
      "response_format.json_schema.x");
  EXPECT_EQ(ParamOf(Completion(R"("attn_structured": {"regex": "a", "choice": ["b"]})")),
            "attn_structured");
  EXPECT_EQ(ParamOf(Completion(R"("attn_structured": {"choice": []})")), "attn_structured.choice");
  EXPECT_EQ(ParamOf(Completion(R"("attn_structured": {"lark": "x"})")), "attn_structured.lark");
  EXPECT_EQ(
      ParamOf(
          Chat(R"("response_format": {"type": "json_object"}, "attn_structured": {"regex": "a"})")),
      "attn_structured");
  EXPECT_EQ(ParamOf(Completion(R"("response_format": {"type": "json_object"})")),
            "response_format");
  auto named = Chat(R"("tools": [{"type": "function", "function": {"name": "f"}}],
                       "tool_choice": {"type": "function", "function": {"name": "f"}})");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_TRUE(named->tool_choice.required);
  EXPECT_EQ(named->tool_choice.function, "f");
}

TEST(OpenAiRequestTest, WhatIsNotImplementedIsRefusedByName) {
  EXPECT_EQ(ParamOf(Chat("\"tools\": []")), "tools");
  EXPECT_EQ(ParamOf(Chat("\"tool_choice\": \"auto\"")), "tool_choice");
  EXPECT_EQ(ParamOf(Chat("\"functions\": []")), "functions");
  EXPECT_EQ(ParamOf(Chat("\"response_format\": {\"type\": \"yaml\"}")), "response_format.type");
  EXPECT_EQ(ParamOf(Chat("\"stream_options\": {\"include_obfuscation\": true}")),
            "stream_options.include_obfuscation");
  EXPECT_EQ(ParamOf(Chat("\"made_up\": 1")), "made_up");
  EXPECT_EQ(ParamOf(Completion("\"echo\": true")), "echo");
  EXPECT_EQ(ParamOf(Completion("\"best_of\": 2")), "best_of");
  EXPECT_EQ(ParamOf(Completion("\"suffix\": \"end\"")), "suffix");
  EXPECT_EQ(ParamOf(Completion("\"messages\": []")), "messages");  // a chat field
  EXPECT_EQ(ParamOf(Chat("\"prompt\": \"x\"")), "prompt");         // a completions field
  EXPECT_EQ(ParamOf(ParseOpenAiRequest(ApiKind::kCompletions, R"({"prompt": ["a", "b"]})")),
            "prompt");
  EXPECT_EQ(ParamOf(ParseOpenAiRequest(
                ApiKind::kChat,
                R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})")),
            "messages[0].content[0].type");
  EXPECT_EQ(ParamOf(ParseOpenAiRequest(ApiKind::kChat,
                                       R"({"messages": [{"role": "function", "content": "x"}]})")),
            "messages[0].role");
  EXPECT_EQ(
      ParamOf(ParseOpenAiRequest(
          ApiKind::kChat, R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})")),
      "messages[0].tool_calls");
}

TEST(OpenAiRequestTest, ValuesOutOfRangeNameTheirField) {
  EXPECT_EQ(ParamOf(Chat("\"temperature\": 2.5")), "temperature");
  EXPECT_EQ(ParamOf(Chat("\"temperature\": \"hot\"")), "temperature");
  EXPECT_EQ(ParamOf(Chat("\"top_p\": 0")), "top_p");
  EXPECT_EQ(ParamOf(Chat("\"n\": 0")), "n");
  EXPECT_EQ(ParamOf(Chat("\"n\": 17")), "n");
  EXPECT_EQ(ParamOf(Chat("\"max_tokens\": 0")), "max_tokens");
  EXPECT_EQ(ParamOf(Chat("\"max_tokens\": 1.5")), "max_tokens");
  EXPECT_EQ(ParamOf(Chat("\"presence_penalty\": 3")), "presence_penalty");
  EXPECT_EQ(ParamOf(Chat("\"top_logprobs\": 2")), "top_logprobs");  // without logprobs
  EXPECT_EQ(ParamOf(Chat("\"logprobs\": true, \"top_logprobs\": 21")), "top_logprobs");
  EXPECT_EQ(ParamOf(Chat("\"stop\": [1]")), "stop[0]");
  EXPECT_EQ(ParamOf(Chat("\"logit_bias\": {\"x\": 1}")), "logit_bias[x]");
  EXPECT_EQ(ParamOf(Chat("\"logit_bias\": {\"5\": 1e300}")), "logit_bias[5]");
  EXPECT_EQ(ParamOf(Chat("\"stream\": 1")), "stream");
  EXPECT_EQ(ParamOf(Chat("\"attn_state\": {\"data\": \"***\"}")), "attn_state.data");
  EXPECT_EQ(ParamOf(Chat("\"attn_state\": {\"data\": \"AA==\"}, \"attn_initial_state\": \"x\"")),
            "attn_initial_state");
  EXPECT_EQ(ParamOf(ParseOpenAiRequest(ApiKind::kChat, R"({"messages": []})")), "messages");
  EXPECT_EQ(ParamOf(ParseOpenAiRequest(ApiKind::kCompletions, R"({"max_tokens": 3})")), "prompt");
}

TEST(OpenAiRequestTest, BrokenJsonNamesTheByte) {
  auto r = ParseOpenAiRequest(ApiKind::kChat, "{\"messages\": [}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "invalid JSON at byte 15")) << r.status();
  EXPECT_EQ(ParamOf(r), "body");
  EXPECT_EQ(ParamOf(ParseOpenAiRequest(ApiKind::kChat, "[1, 2]")), "body");
  // A number too large for a double (found by fuzz_openai_request).
  EXPECT_EQ(ParamOf(ParseOpenAiRequest(ApiKind::kCompletions, R"({"prompt": [1, 2e16666]})")),
            "body");
  EXPECT_EQ(ParamOf(ParseOpenAiRequest(ApiKind::kChat, "")), "body");
}

TEST(OpenAiRequestTest, TheStateExtensionCarriesItsBytes) {
  auto r = Chat(absl::StrCat("\"attn_return_state\": true, \"attn_state\": {\"data\": \"",
                             absl::Base64Escape("state bytes"), "\", \"reply_stopped\": false}"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->return_state);
  EXPECT_EQ(*r->state, "state bytes");
  EXPECT_FALSE(r->state_reply_stopped);
}

TEST(OpenAiResponseTest, StatusesBecomeHttpStatusesAndErrorTypes) {
  struct Case {
    absl::Status status;
    int http;
    const char* type;
    const char* param;
  };
  const Case cases[] = {
      {InvalidField("temperature", "too hot"), 400, "invalid_request_error", "temperature"},
      {FieldError(absl::StatusCode::kOutOfRange, "messages", "longer than the context"), 400,
       "invalid_request_error", "messages"},
      // The field travels with the status; a message is never parsed for one.
      {absl::InvalidArgumentError("temperature: too hot"), 400, "invalid_request_error", nullptr},
      {PrefixField(InvalidField("state", "truncated"), "attn_"), 400, "invalid_request_error",
       "attn_state"},
      {absl::UnauthenticatedError("missing API key"), 401, "authentication_error", nullptr},
      {FieldError(absl::StatusCode::kNotFound, "model", "\"x\" is not hosted here"), 404,
       "not_found_error", "model"},
      {absl::ResourceExhaustedError("the queue is full"), 429, "rate_limit_error", nullptr},
      {absl::UnavailableError("the server is shutting down"), 503, "server_unavailable", nullptr},
      {absl::DeadlineExceededError("too slow"), 504, "timeout", nullptr},
      {absl::InternalError("bug"), 500, "server_error", nullptr},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(HttpStatusOf(c.status.code()), c.http) << c.status;
    const Json error = ErrorObject(c.status)["error"];
    EXPECT_EQ(error["type"], c.type) << c.status;
    EXPECT_EQ(error["message"], std::string(c.status.message()));
    if (c.param == nullptr) {
      EXPECT_TRUE(error["param"].is_null()) << c.status;
    } else {
      EXPECT_EQ(error["param"], c.param) << c.status;
    }
  }
  EXPECT_EQ(ErrorObject(FieldError(absl::StatusCode::kNotFound, "model",
                                   "\"x\" is not hosted"))["error"]["code"],
            "model_not_found");
}

TEST(OpenAiResponseTest, ChunksAndWholeResponsesFollowTheEvents) {
  const Tokenizer& tokenizer = attn::testing::TinyTokenizer();
  ResponseContext chat =
      NewResponseContext(ApiKind::kChat, "m", "fp", tokenizer, /*logprobs=*/true, true);
  EXPECT_TRUE(absl::StartsWith(chat.id, "chatcmpl-"));
  StreamEvent first;
  first.text = "ab";
  first.token_ids = {3, 4};
  first.logprobs = {-0.5f, -0.25f};
  first.top_logprobs = {{{3, -0.5f}}, {{4, -0.25f}}};
  Json chunk = StreamChunk(chat, 0, first, /*first=*/true, 0);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunk["choices"][0]["delta"]["content"], "ab");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  ASSERT_EQ(chunk["choices"][0]["logprobs"]["content"].size(), 2u);
  EXPECT_FLOAT_EQ(chunk["choices"][0]["logprobs"]["content"][1]["logprob"].get<float>(), -0.25f);
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 1u);

  StreamEvent last;
  last.text = "c";
  last.token_ids = {5};
  last.logprobs = {-1.0f};
  last.top_logprobs = {{{5, -1.0f}}};
  last.last = true;
  last.finish_reason = FinishReason::kLength;
  last.prompt_tokens = 4;
  last.completion_tokens = 3;
  last.cached_tokens = 2;
  chunk = StreamChunk(chat, 1, last, /*first=*/false, 2);
  EXPECT_EQ(chunk["choices"][0]["index"], 1);
  EXPECT_FALSE(chunk["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(chunk["choices"][0]["finish_reason"], "length");

  std::vector<ChoiceLog> choices(2);
  for (ChoiceLog& choice : choices) {
    choice.Add(first);
    choice.Add(last);
  }
  const Json whole = CompletionResponse(chat, choices);
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][1]["message"]["content"], "abc");
  EXPECT_EQ(whole["choices"][1]["logprobs"]["content"].size(), 3u);
  EXPECT_EQ(whole["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(whole["usage"]["completion_tokens"], 6);  // both choices'
  EXPECT_EQ(whole["usage"]["total_tokens"], 10);
  EXPECT_EQ(whole["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(UsageChunk(chat, choices)["choices"].size(), 0u);
  EXPECT_EQ(ServerSentEvent(Json{{"a", 1}}), "data: {\"a\":1}\n\n");

  ResponseContext text =
      NewResponseContext(ApiKind::kCompletions, "m", "fp", tokenizer, /*logprobs=*/true, false);
  const Json completion = CompletionResponse(text, choices);
  EXPECT_EQ(completion["object"], "text_completion");
  EXPECT_EQ(completion["choices"][0]["text"], "abc");
  const Json& logprobs = completion["choices"][0]["logprobs"];
  EXPECT_EQ(logprobs["tokens"].size(), 3u);
  EXPECT_EQ(logprobs["token_logprobs"].size(), 3u);
  EXPECT_EQ(logprobs["text_offset"][0], 0);
}

}  // namespace
}  // namespace attn::serving::http
