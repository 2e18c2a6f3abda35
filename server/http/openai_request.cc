#include "server/http/openai_request.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "model/text/tokenizer.h"
#include "nlohmann/json.hpp"
#include "server/core/validation.h"
#include "server/http/json_fields.h"
#include "util/field_error.h"

namespace attn::serving::http {
namespace {

// The fields each API takes; any other is refused by name.
const std::set<std::string>& KnownFields(ApiKind kind) {
  static const auto* completions = new std::set<std::string>{"model",
                                                             "prompt",
                                                             "max_tokens",
                                                             "temperature",
                                                             "top_p",
                                                             "n",
                                                             "stop",
                                                             "stream",
                                                             "stream_options",
                                                             "logprobs",
                                                             "seed",
                                                             "user",
                                                             "presence_penalty",
                                                             "frequency_penalty",
                                                             "logit_bias",
                                                             "echo",
                                                             "best_of",
                                                             "suffix",
                                                             "attn_return_state",
                                                             "attn_state",
                                                             "attn_initial_state",
                                                             "attn_ignore_eos",
                                                             "attn_response_format",
                                                             "attn_structured"};
  static const auto* chat = new std::set<std::string>{"model",
                                                      "messages",
                                                      "max_tokens",
                                                      "max_completion_tokens",
                                                      "temperature",
                                                      "top_p",
                                                      "n",
                                                      "stop",
                                                      "stream",
                                                      "stream_options",
                                                      "logprobs",
                                                      "top_logprobs",
                                                      "seed",
                                                      "user",
                                                      "presence_penalty",
                                                      "frequency_penalty",
                                                      "logit_bias",
                                                      "response_format",
                                                      "tools",
                                                      "tool_choice",
                                                      "parallel_tool_calls",
                                                      "attn_return_state",
                                                      "attn_state",
                                                      "attn_initial_state",
                                                      "attn_ignore_eos",
                                                      "attn_structured"};
  return kind == ApiKind::kChat ? *chat : *completions;
}

absl::Status ParsePrompt(const Fields& f, OpenAiRequest* r) {
  if (!f.Has("prompt")) return InvalidField("prompt", "missing");
  const Json& prompt = f["prompt"];
  if (prompt.is_string()) {
    r->prompt_text = prompt.get<std::string>();
    return absl::OkStatus();
  }
  if (!prompt.is_array()) return InvalidField("prompt", "must be a string or a list of token ids");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i].is_string()) {
      return InvalidField("prompt", "a list of prompts is not supported; send one per request");
    }
    if (!prompt[i].is_number_integer()) {
      return InvalidField(absl::StrCat("prompt[", i, "]"), "must be a token id");
    }
    r->prompt_ids.push_back(prompt[i].get<int64_t>());
  }
  if (r->prompt_ids.empty()) return InvalidField("prompt", "is empty");
  return absl::OkStatus();
}

// An assistant message's tool_calls: [{"id", "type": "function",
// "function": {"name", "arguments": a JSON string}}], with each call's
// arguments parsed into the object a chat template expects.
absl::StatusOr<Json> ToolCalls(const Json& calls, const std::string& field) {
  if (!calls.is_array()) return InvalidField(field, "must be a list of tool calls");
  Json out = Json::array();
  for (size_t j = 0; j < calls.size(); ++j) {
    const std::string call = absl::StrCat(field, "[", j, "]");
    Json c = calls[j];
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) {
      return InvalidField(call, "must be an object with a function");
    }
    Json& function = c["function"];
    if (!function.contains("name") || !function["name"].is_string()) {
      return InvalidField(absl::StrCat(call, ".function.name"), "must be a string");
    }
    if (function.contains("arguments") && function["arguments"].is_string()) {
      Json arguments = Json::parse(function["arguments"].get<std::string>(), nullptr, false);
      if (arguments.is_discarded()) {
        return InvalidField(absl::StrCat(call, ".function.arguments"), "is not JSON");
      }
      function["arguments"] = std::move(arguments);
    }
    out.push_back(std::move(c));
  }
  return out;
}

// One message, its keys in the order sent; role and content also apart for
// the built-in chat formats (a missing or null content is empty there).
}  // namespace

absl::StatusOr<ChatMessage> ParseChatMessage(const Json& m, const std::string& field) {
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
    return InvalidField(field, "must be an object with a role");
  }
  ChatMessage message;
  message.role = m["role"].get<std::string>();
  if (message.role == "developer") message.role = "system";  // OpenAI's newer name for it
  if (message.role != "system" && message.role != "user" && message.role != "assistant" &&
      message.role != "tool") {
    return InvalidField(absl::StrCat(field, ".role"),
                        absl::StrCat(message.role, " is not system, user, assistant or tool"));
  }
  Json json = Json::object();
  for (const auto& item : m.items()) {
    const std::string key = absl::StrCat(field, ".", item.key());
    if (item.key() == "role") {
      json["role"] = message.role;
    } else if (item.key() == "content" && !item.value().is_null()) {
      absl::StatusOr<std::string> content = TextContent(item.value(), key, {"text"});
      if (!content.ok()) return content.status();
      message.content = *content;
      json["content"] = *std::move(content);
    } else if (item.key() == "tool_calls" && !item.value().is_null()) {
      if (message.role != "assistant") {
        return InvalidField(key, "only assistant messages make tool calls");
      }
      absl::StatusOr<Json> calls = ToolCalls(item.value(), key);
      if (!calls.ok()) return calls.status();
      json["tool_calls"] = *std::move(calls);
    } else if ((item.key() == "name" || item.key() == "tool_call_id") &&
               !item.value().is_string()) {
      return InvalidField(key, "must be a string");
    } else {
      json[item.key()] = item.value();  // as sent: null content, a client's own keys
    }
  }
  if (!m.contains("content") && !json.contains("tool_calls")) {
    return InvalidField(absl::StrCat(field, ".content"), "missing");
  }
  message.json = json.dump();
  return message;
}

namespace {

absl::Status ParseMessages(const Fields& f, OpenAiRequest* r) {
  if (!f.Has("messages") || !f["messages"].is_array() || f["messages"].empty()) {
    return InvalidField("messages", "must be a non-empty list of messages");
  }
  const Json& messages = f["messages"];
  for (size_t i = 0; i < messages.size(); ++i) {
    absl::StatusOr<ChatMessage> message =
        ParseChatMessage(messages[i], absl::StrCat("messages[", i, "]"));
    if (!message.ok()) return message.status();
    r->messages.push_back(*std::move(message));
  }
  return absl::OkStatus();
}

absl::Status ParseStop(const Fields& f, OpenAiRequest* r) {
  if (!f.Has("stop")) return absl::OkStatus();
  const Json& stop = f["stop"];
  if (stop.is_string()) {
    r->stop.push_back(stop.get<std::string>());
    return absl::OkStatus();
  }
  if (!stop.is_array()) return InvalidField("stop", "must be a string or a list of strings");
  for (size_t i = 0; i < stop.size(); ++i) {
    if (!stop[i].is_string())
      return InvalidField(absl::StrCat("stop[", i, "]"), "must be a string");
    r->stop.push_back(stop[i].get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status ParseLogitBias(const Fields& f, OpenAiRequest* r) {
  if (!f.Has("logit_bias")) return absl::OkStatus();
  if (!f["logit_bias"].is_object()) {
    return InvalidField("logit_bias", "must be an object of token ids and biases");
  }
  for (const auto& item : f["logit_bias"].items()) {
    int64_t token = 0;
    const std::string field = absl::StrCat("logit_bias[", item.key(), "]");
    if (!absl::SimpleAtoi(item.key(), &token)) return InvalidField(field, "is not a token id");
    if (!item.value().is_number()) return InvalidField(field, "must be a number");
    const double bias = item.value().get<double>();
    if (!(bias >= -100.0 && bias <= 100.0)) {
      return InvalidField(field, absl::StrCat(bias, " is outside [-100, 100]"));
    }
    r->logit_bias.emplace_back(token, static_cast<float>(bias));
  }
  return absl::OkStatus();
}

// response_format (chat), attn_response_format (completions) and
// attn_structured; one of them at most.
absl::Status ParseConstraint(const Fields& f, ApiKind kind, OpenAiRequest* r) {
  const char* format = kind == ApiKind::kChat ? "response_format" : "attn_response_format";
  if (f.Has(format)) {
    auto parsed = ParseResponseFormat(f[format], format);
    if (!parsed.ok()) return parsed.status();
    r->constraint = *std::move(parsed);
  }
  if (f.Has("attn_structured")) {
    if (r->constraint.active()) {
      return InvalidField("attn_structured", "give ", format, " or attn_structured, not both");
    }
    auto parsed = ParseStructured(f["attn_structured"], "attn_structured");
    if (!parsed.ok()) return parsed.status();
    r->constraint = *std::move(parsed);
  }
  return absl::OkStatus();
}

// Fields this server knows but does not implement: refused unless they
// ask for what it does anyway.
absl::Status RefuseUnimplemented(const Fields& f, ApiKind kind) {
  if (kind == ApiKind::kCompletions) {
    if (f.Has("echo") && !(f["echo"].is_boolean() && !f["echo"].get<bool>())) {
      return InvalidField("echo", "is not supported");
    }
    if (f.Has("best_of") && !(f["best_of"].is_number_integer() && f["best_of"] == 1)) {
      return InvalidField("best_of", "only 1 is supported");
    }
    if (f.Has("suffix") && !(f["suffix"].is_string() && f["suffix"].get<std::string>().empty())) {
      return InvalidField("suffix", "is not supported");
    }
  }
  return absl::OkStatus();
}

// tools: [{"type": "function", "function": {"name", "description",
// "parameters", "strict"}}], kept as JSON text for the chat template.
absl::StatusOr<std::string> ToolList(const Json& tools) {
  if (!tools.is_array() || tools.empty() || tools.size() > 128) {
    return InvalidField("tools", "must be a list of 1 to 128 function tools");
  }
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string field = absl::StrCat("tools[", i, "]");
    const Json& tool = tools[i];
    if (!tool.is_object() || tool.value("type", Json()) != "function") {
      return InvalidField(absl::StrCat(field, ".type"), "only function tools are supported");
    }
    if (!tool.contains("function") || !tool["function"].is_object()) {
      return InvalidField(absl::StrCat(field, ".function"), "must be an object");
    }
    const Json& function = tool["function"];
    const Json name = function.value("name", Json());
    if (!name.is_string() || !IsFunctionName(name.get<std::string>())) {
      return InvalidField(absl::StrCat(field, ".function.name"),
                          "must be 1 to 64 letters, digits, '_' or '-'");
    }
    if (function.contains("description") && !function["description"].is_string()) {
      return InvalidField(absl::StrCat(field, ".function.description"), "must be a string");
    }
    if (function.contains("parameters") && !function["parameters"].is_object()) {
      return InvalidField(absl::StrCat(field, ".function.parameters"),
                          "must be a JSON Schema object");
    }
  }
  return tools.dump();
}

// tools, tool_choice and parallel_tool_calls.
absl::Status ParseTools(const Fields& f, OpenAiRequest* r) {
  if (f.Has("tools")) {
    absl::StatusOr<std::string> tools = ToolList(f["tools"]);
    if (!tools.ok()) return tools.status();
    r->tools_json = *std::move(tools);
  }
  if (f.Has("tool_choice")) {
    absl::StatusOr<ToolChoice> choice = ParseToolChoice(f["tool_choice"]);
    if (!choice.ok()) return choice.status();
    r->tool_choice = *std::move(choice);
    if (r->tools_json.empty() && !r->tool_choice.none) {
      return InvalidField("tool_choice", "is only allowed when tools are given");
    }
  }
  return f.Bool("parallel_tool_calls", &r->parallel_tool_calls);
}

absl::Status ParseExtensions(const Fields& f, OpenAiRequest* r) {
  if (absl::Status s = f.Bool("attn_return_state", &r->return_state); !s.ok()) return s;
  if (absl::Status s = f.String("attn_initial_state", &r->initial_state); !s.ok()) return s;
  if (absl::Status s = f.Bool("attn_ignore_eos", &r->ignore_eos); !s.ok()) return s;
  if (!f.Has("attn_state")) return absl::OkStatus();
  const Json& state = f["attn_state"];
  if (!state.is_object() || !state.contains("data") || !state["data"].is_string()) {
    return InvalidField("attn_state", "must be the object a response returned ({\"data\": ...})");
  }
  std::string bytes;
  if (!absl::Base64Unescape(state["data"].get<std::string>(), &bytes)) {
    return InvalidField("attn_state.data", "is not base64");
  }
  r->state = std::move(bytes);
  if (state.contains("reply_stopped") && state["reply_stopped"].is_boolean()) {
    r->state_reply_stopped = state["reply_stopped"].get<bool>();
  }
  return absl::OkStatus();
}

absl::Status ParseSampling(const Fields& f, OpenAiRequest* r) {
  int64_t max_tokens = 0;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (!f.Has(key)) continue;
    if (absl::Status s = f.Integer(key, 1, int64_t{1} << 40, &max_tokens); !s.ok()) return s;
    r->max_tokens = max_tokens;
  }
  int64_t seed = 0;
  for (absl::Status s :
       {f.Number("temperature", 0.0, 2.0, &r->temperature), f.Number("top_p", 1e-9, 1.0, &r->top_p),
        f.Integer("n", 1, kMaxChoices, &r->n),
        f.Number("presence_penalty", -2.0, 2.0, &r->presence_penalty),
        f.Number("frequency_penalty", -2.0, 2.0, &r->frequency_penalty),
        f.Integer("seed", INT64_MIN, INT64_MAX, &seed), f.String("user", &r->user)}) {
    if (!s.ok()) return s;
  }
  if (f.Has("seed")) r->seed = static_cast<uint64_t>(seed);
  return ParseLogitBias(f, r);
}

absl::Status ParseStreamAndLogprobs(const Fields& f, OpenAiRequest* r) {
  if (absl::Status s = f.Bool("stream", &r->stream); !s.ok()) return s;
  if (f.Has("stream_options")) {
    const Json& options = f["stream_options"];
    if (!options.is_object()) return InvalidField("stream_options", "must be an object");
    for (const auto& item : options.items()) {
      if (item.key() != "include_usage" || !item.value().is_boolean()) {
        return InvalidField(absl::StrCat("stream_options.", item.key()), "is not supported");
      }
      r->include_usage = item.value().get<bool>();
    }
  }
  if (r->kind == ApiKind::kCompletions) {
    int64_t logprobs = -1;
    if (absl::Status s = f.Integer("logprobs", 0, kMaxTopLogprobs, &logprobs); !s.ok()) return s;
    r->logprobs = logprobs >= 0;
    r->top_logprobs = std::max<int64_t>(logprobs, 0);
    return absl::OkStatus();
  }
  if (absl::Status s = f.Bool("logprobs", &r->logprobs); !s.ok()) return s;
  if (absl::Status s = f.Integer("top_logprobs", 0, kMaxTopLogprobs, &r->top_logprobs); !s.ok()) {
    return s;
  }
  if (r->top_logprobs > 0 && !r->logprobs) {
    return InvalidField("top_logprobs", "needs logprobs: true");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> TextContent(const Json& content, const std::string& field,
                                        std::initializer_list<const char*> types) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return InvalidField(field, "must be a string or a list of text parts");
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string part = absl::StrCat(field, "[", j, "]");
    const Json& p = content[j];
    if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) {
      return InvalidField(part, "must be an object with a type");
    }
    const std::string type = p["type"].get<std::string>();
    if (std::none_of(types.begin(), types.end(), [&](const char* t) { return type == t; })) {
      return InvalidField(absl::StrCat(part, ".type"),
                          absl::StrCat(type, " parts are not supported; only text"));
    }
    if (!p.contains("text") || !p["text"].is_string()) {
      return InvalidField(absl::StrCat(part, ".text"), "must be a string");
    }
    text += p["text"].get<std::string>();
  }
  return text;
}

absl::StatusOr<ToolChoice> ParseToolChoice(const Json& choice) {
  ToolChoice out;
  if (choice == "none" || choice == "auto" || choice == "required") {
    out.none = choice == "none";
    out.required = choice == "required";
    return out;
  }
  const Json* name = nullptr;
  if (choice.is_object() && choice.value("type", Json()) == "function") {
    if (choice.contains("function") && choice["function"].is_object()) {
      name = choice["function"].contains("name") ? &choice["function"]["name"] : nullptr;
    } else if (choice.contains("name")) {
      name = &choice["name"];
    }
  }
  if (name == nullptr || !name->is_string()) {
    return InvalidField("tool_choice",
                        "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                        "\"function\": {\"name\": ...}}");
  }
  out.required = true;
  out.function = name->get<std::string>();
  return out;
}

Json ToolChoice::ToResponsesJson() const {
  if (!function.empty()) return Json{{"type", "function"}, {"name", function}};
  return none ? "none" : required ? "required" : "auto";
}

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(ApiKind kind, absl::string_view body) {
  absl::StatusOr<Json> parsed = ParseBody(body, KnownFields(kind));
  if (!parsed.ok()) return parsed.status();
  const Json& json = *parsed;
  OpenAiRequest r;
  r.kind = kind;
  const Fields f(json);
  if (absl::Status s = f.String("model", &r.model); !s.ok()) return s;
  for (absl::Status s :
       {kind == ApiKind::kChat ? ParseMessages(f, &r) : ParsePrompt(f, &r),
        kind == ApiKind::kChat ? ParseTools(f, &r) : absl::OkStatus(), ParseStop(f, &r),
        ParseSampling(f, &r), ParseStreamAndLogprobs(f, &r), RefuseUnimplemented(f, kind),
        ParseExtensions(f, &r), ParseConstraint(f, kind, &r)}) {
    if (!s.ok()) return s;
  }
  if (r.state && !r.initial_state.empty()) {
    return InvalidField("attn_initial_state", "give attn_state or attn_initial_state, not both");
  }
  return r;
}

namespace {

// The prompt's tokens on `target`: the completion's, or the chat rendered in
// the model's format (only the new messages after a state).
absl::StatusOr<std::vector<int64_t>> PromptOf(const OpenAiRequest& r, const RequestTarget& target) {
  const int64_t limit = target.limits.max_prompt_tokens;
  if (r.kind == ApiKind::kCompletions) {
    return PromptTokens(*target.tokenizer, r.prompt_text.has_value(), r.prompt_text.value_or(""),
                        r.prompt_ids, "prompt", "prompt", limit, !r.state);
  }
  if (target.chat_template != nullptr && r.state) {
    // A template renders whole conversations; the state cache finds the
    // stored state of the turns a client sends again.
    return InvalidField("attn_state",
                        "this model renders chats with its chat template, which takes the whole "
                        "conversation; send every message without attn_state (the server's "
                        "state cache reuses the earlier turns)");
  }
  absl::StatusOr<std::string> text =
      r.state
          ? ContinueChatFor(target.chat_format, r.messages, r.tools_json, r.state_reply_stopped)
          : RenderChatFor(target.chat_template, target.chat_format, r.messages, r.tools_json, true);
  if (!text.ok()) return text.status();
  // A template writes the special tokens the model expects (BOS) itself.
  const bool add_special = target.chat_template == nullptr && !r.state;
  return PromptTokens(*target.tokenizer, true, *text, {}, "messages", "messages", limit,
                      add_special);
}

// The extensions' errors name their attn_ field.
absl::Status Extension(const absl::Status& status) { return PrefixField(status, "attn_"); }

}  // namespace

absl::StatusOr<std::vector<EngineRequest>> ToEngineRequests(const OpenAiRequest& r,
                                                            const RequestTarget& target,
                                                            absl::Time deadline) {
  EngineRequest base;
  base.protocol = Protocol::kHttp;
  base.deadline = deadline;
  absl::StatusOr<std::vector<int64_t>> prompt = PromptOf(r, target);
  if (!prompt.ok()) return prompt.status();
  base.prompt = *std::move(prompt);
  base.max_tokens = r.max_tokens.value_or(target.limits.default_max_tokens);
  base.stop = r.stop;
  if (r.kind == ApiKind::kChat && target.chat_template != nullptr) {
    base.stop_token_ids = target.chat_stop_ids;
  } else if (r.kind == ApiKind::kChat) {
    for (const std::string& stop : ChatStops(target.chat_format)) base.stop.push_back(stop);
  }
  base.sampling.temperature = r.temperature;
  base.sampling.top_p = r.top_p;
  base.sampling.presence_penalty = r.presence_penalty;
  base.sampling.frequency_penalty = r.frequency_penalty;
  base.sampling.logit_bias = r.logit_bias;
  base.sampling.top_logprobs = r.top_logprobs;
  base.logprobs = r.logprobs;
  base.return_state = r.return_state;
  const ToolForcing forcing{r.tool_choice.required, r.tool_choice.function, r.tools_json,
                            r.parallel_tool_calls, target.tool_call_format};
  auto grammar = OutputGrammar(r.constraint, forcing);
  if (!grammar.ok()) return grammar.status();
  base.grammar = *std::move(grammar);
  base.ignore_eos = r.ignore_eos;
  if (absl::Status checked = CheckGeneration(target.limits, *target.tokenizer, base);
      !checked.ok()) {
    return checked;
  }
  if (r.state) {
    if (absl::Status s = Extension(ApplyStartState(*r.state, target.state, target.limits, &base));
        !s.ok()) {
      return s;
    }
  }
  if (!r.initial_state.empty()) {
    const InitialStates none;
    const InitialStates& states = target.initial_states ? *target.initial_states : none;
    if (absl::Status s =
            Extension(ApplyInitialState(r.initial_state, target.state.model, states, &base));
        !s.ok()) {
      return s;
    }
  }
  std::vector<EngineRequest> choices;
  for (int64_t i = 0; i < r.n; ++i) {
    choices.push_back(base);
    choices.back().sampling.seed = r.seed ? *r.seed + static_cast<uint64_t>(i) : RandomSeed();
  }
  return choices;
}

absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(absl::string_view body) {
  static const auto* known = new std::set<std::string>{
      "model", "prompt", "messages", "add_generation_prompt", "add_special_tokens", "tools"};
  absl::StatusOr<Json> parsed = ParseBody(body, *known);
  if (!parsed.ok()) return parsed.status();
  const Fields f(*parsed);
  TokenizeRequest r;
  if (absl::Status s = f.String("model", &r.model); !s.ok()) return s;
  if (f.Has("tools")) {
    absl::StatusOr<std::string> tools = ToolList(f["tools"]);
    if (!tools.ok()) return tools.status();
    r.input.tools_json = *std::move(tools);
  }
  if (f.Has("messages") == f.Has("prompt")) {
    return InvalidField("prompt", f.Has("prompt") ? "give prompt or messages, not both"
                                                  : "missing (or give messages)");
  }
  if (f.Has("prompt")) {
    if (!f["prompt"].is_string()) return InvalidField("prompt", "must be a string");
    r.input.text = f["prompt"].get<std::string>();
  } else {
    OpenAiRequest chat;
    if (absl::Status s = ParseMessages(f, &chat); !s.ok()) return s;
    r.input.messages = std::move(chat.messages);
    if (absl::Status s = f.Bool("add_generation_prompt", &r.input.add_generation_prompt); !s.ok()) {
      return s;
    }
  }
  bool special = false;
  if (absl::Status s = f.Bool("add_special_tokens", &special); !s.ok()) return s;
  if (f.Has("add_special_tokens")) r.input.add_special_tokens = special;
  return r;
}

absl::StatusOr<DetokenizeRequest> ParseDetokenizeRequest(absl::string_view body) {
  static const auto* known = new std::set<std::string>{"model", "tokens"};
  absl::StatusOr<Json> parsed = ParseBody(body, *known);
  if (!parsed.ok()) return parsed.status();
  const Fields f(*parsed);
  DetokenizeRequest r;
  if (absl::Status s = f.String("model", &r.model); !s.ok()) return s;
  if (!f.Has("tokens") || !f["tokens"].is_array()) {
    return InvalidField("tokens", "must be a list of token ids");
  }
  for (size_t i = 0; i < f["tokens"].size(); ++i) {
    if (!f["tokens"][i].is_number_integer()) {
      return InvalidField(absl::StrCat("tokens[", i, "]"), "must be a token id");
    }
    r.tokens.push_back(f["tokens"][i].get<int64_t>());
  }
  return r;
}

}  // namespace attn::serving::http
