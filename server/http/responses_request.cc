#include "server/http/responses_request.h"

#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/text/chat_template.h"
#include "model/text/tokenizer.h"
#include "server/core/validation.h"
#include "util/field_error.h"

namespace attn::serving::http {
namespace {

const std::set<std::string>& KnownFields() {
  static const auto* known = new std::set<std::string>{"model",
                                                       "input",
                                                       "instructions",
                                                       "previous_response_id",
                                                       "max_output_tokens",
                                                       "temperature",
                                                       "top_p",
                                                       "tools",
                                                       "tool_choice",
                                                       "parallel_tool_calls",
                                                       "stream",
                                                       "stream_options",
                                                       "store",
                                                       "metadata",
                                                       "user",
                                                       "text",
                                                       "truncation",
                                                       "include",
                                                       "reasoning",
                                                       "background",
                                                       "service_tier",
                                                       "top_logprobs",
                                                       "max_tool_calls",
                                                       "prompt_cache_key",
                                                       "safety_identifier",
                                                       "conversation",
                                                       "prompt",
                                                       "attn_ignore_eos"};
  return *known;
}

// A content's text: input_text, output_text (an earlier reply sent back)
// or text parts.
absl::StatusOr<std::string> PartsText(const Json& content, const std::string& field) {
  return TextContent(content, field, {"input_text", "output_text", "text"});
}

absl::StatusOr<std::string> StringOf(const Json& item, const char* key, const std::string& field) {
  if (!item.contains(key) || !item[key].is_string()) {
    return InvalidField(absl::StrCat(field, ".", key), "must be a string");
  }
  return item[key].get<std::string>();
}

// A function_call item as a chat tool call, appended to the assistant
// message that ends `messages` (a new one when the last is not).
absl::Status AddFunctionCall(const Json& item, const std::string& field, Json* messages) {
  absl::StatusOr<std::string> call_id = StringOf(item, "call_id", field);
  absl::StatusOr<std::string> name = StringOf(item, "name", field);
  absl::StatusOr<std::string> arguments = StringOf(item, "arguments", field);
  for (const auto* s : {&call_id, &name, &arguments}) {
    if (!s->ok()) return s->status();
  }
  if (Json::parse(*arguments, nullptr, false).is_discarded()) {
    return InvalidField(absl::StrCat(field, ".arguments"), "is not JSON");
  }
  Json call = {{"id", *call_id},
               {"type", "function"},
               {"function", {{"name", *name}, {"arguments", *arguments}}}};
  if (messages->empty() || messages->back()["role"] != "assistant") {
    messages->push_back({{"role", "assistant"}, {"content", nullptr}});
  }
  Json& last = messages->back();
  if (!last.contains("tool_calls")) last["tool_calls"] = Json::array();
  last["tool_calls"].push_back(std::move(call));
  return absl::OkStatus();
}

// One input item as chat messages: a message ({"role", "content"}, with or
// without "type": "message"), a function_call (an assistant's tool call) or
// a function_call_output (a tool message). Other keys (an item's id and
// status, as a response's output items carry them) are not read.
absl::Status AddItem(const Json& item, const std::string& field, Json* messages) {
  if (!item.is_object()) return InvalidField(field, "must be an object");
  const Json type = item.value("type", Json("message"));
  if (type == "function_call") return AddFunctionCall(item, field, messages);
  if (type == "function_call_output") {
    absl::StatusOr<std::string> call_id = StringOf(item, "call_id", field);
    if (!call_id.ok()) return call_id.status();
    if (!item.contains("output")) return InvalidField(absl::StrCat(field, ".output"), "missing");
    absl::StatusOr<std::string> output = PartsText(item["output"], absl::StrCat(field, ".output"));
    if (!output.ok()) return output.status();
    messages->push_back({{"role", "tool"}, {"tool_call_id", *call_id}, {"content", *output}});
    return absl::OkStatus();
  }
  if (type != "message") {
    return InvalidField(absl::StrCat(field, ".type"),
                        "only message, function_call and function_call_output items are "
                        "supported");
  }
  const Json role = item.value("role", Json());
  if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
    return InvalidField(absl::StrCat(field, ".role"),
                        "must be user, assistant, system or developer");
  }
  if (!item.contains("content")) return InvalidField(absl::StrCat(field, ".content"), "missing");
  absl::StatusOr<std::string> content = PartsText(item["content"], absl::StrCat(field, ".content"));
  if (!content.ok()) return content.status();
  messages->push_back({{"role", role}, {"content", *content}});
  return absl::OkStatus();
}

absl::Status ParseInput(const Fields& f, ResponsesRequest* r) {
  Json messages = Json::array();
  if (f.Has("input") && f["input"].is_string()) {
    messages.push_back({{"role", "user"}, {"content", f["input"]}});
  } else if (f.Has("input") && f["input"].is_array() && !f["input"].empty()) {
    for (size_t i = 0; i < f["input"].size(); ++i) {
      const std::string field = absl::StrCat("input[", i, "]");
      if (absl::Status s = AddItem(f["input"][i], field, &messages); !s.ok()) return s;
    }
  } else {
    return InvalidField("input", "must be a string or a non-empty list of items");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    absl::StatusOr<ChatMessage> message = ParseChatMessage(messages[i], "input");
    if (!message.ok()) return message.status();
    r->input.push_back(*std::move(message));
  }
  return absl::OkStatus();
}

// tools: [{"type": "function", "name", "description", "parameters",
// "strict"}], also kept in Chat Completions' form for the chat template.
absl::Status ParseTools(const Fields& f, ResponsesRequest* r) {
  if (f.Has("tools")) {
    const Json& tools = f["tools"];
    if (!tools.is_array() || tools.size() > 128) {
      return InvalidField("tools", "must be a list of at most 128 function tools");
    }
    Json chat = Json::array();
    for (size_t i = 0; i < tools.size(); ++i) {
      const std::string field = absl::StrCat("tools[", i, "]");
      const Json& tool = tools[i];
      if (!tool.is_object() || tool.value("type", Json()) != "function") {
        return InvalidField(absl::StrCat(field, ".type"), "only function tools are supported");
      }
      const Json name = tool.value("name", Json());
      if (!name.is_string() || !IsFunctionName(name.get<std::string>())) {
        return InvalidField(absl::StrCat(field, ".name"),
                            "must be 1 to 64 letters, digits, '_' or '-'");
      }
      Json function = {{"name", name}};
      if (tool.contains("description") && !tool["description"].is_null()) {
        if (!tool["description"].is_string()) {
          return InvalidField(absl::StrCat(field, ".description"), "must be a string");
        }
        function["description"] = tool["description"];
      }
      if (tool.contains("parameters") && !tool["parameters"].is_null()) {
        if (!tool["parameters"].is_object()) {
          return InvalidField(absl::StrCat(field, ".parameters"), "must be a JSON Schema object");
        }
        function["parameters"] = tool["parameters"];
      }
      chat.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    r->tools = tools;
    if (!chat.empty()) r->tools_json = chat.dump();
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

// text: {"format": {"type": "text" | "json_object" | "json_schema", ...}}.
absl::Status ParseText(const Fields& f, ResponsesRequest* r) {
  if (!f.Has("text")) return absl::OkStatus();
  const Json& text = f["text"];
  if (!text.is_object()) return InvalidField("text", "must be an object with the \"format\"");
  for (const auto& item : text.items()) {
    if (item.key() != "format") {
      return InvalidField(absl::StrCat("text.", item.key()), "is not supported");
    }
  }
  if (!text.contains("format")) return absl::OkStatus();
  auto parsed = ParseResponseFormat(text["format"], "text.format", /*flat=*/true);
  if (!parsed.ok()) return parsed.status();
  r->constraint = *std::move(parsed);
  r->text_format = text["format"];
  return absl::OkStatus();
}

// Fields of the API this server does not implement: refused unless they
// ask for what it does anyway.
absl::Status RefuseUnimplemented(const Fields& f) {
  auto refuse = [](const char* field, const char* why) { return InvalidField(field, why); };
  if (f.Has("truncation") && f["truncation"] != "disabled") {
    return refuse("truncation", "only \"disabled\" is supported");
  }
  if (f.Has("include") && !(f["include"].is_array() && f["include"].empty())) {
    return refuse("include", "is not supported");
  }
  if (f.Has("reasoning") && !(f["reasoning"].is_object() && f["reasoning"].empty())) {
    return refuse("reasoning", "is not supported: the hosted models do not reason separately");
  }
  if (f.Has("background") && f["background"] != false) {
    return refuse("background", "is not supported");
  }
  if (f.Has("top_logprobs") && f["top_logprobs"] != 0) {
    return refuse("top_logprobs", "is not supported on /v1/responses; use /v1/chat/completions");
  }
  for (const char* field : {"conversation", "prompt", "max_tool_calls"}) {
    if (f.Has(field)) return refuse(field, "is not supported");
  }
  if (f.Has("stream_options")) {
    const Json& options = f["stream_options"];
    if (!options.is_object()) return refuse("stream_options", "must be an object");
    for (const auto& item : options.items()) {
      if (item.key() != "include_obfuscation" || !item.value().is_boolean()) {
        return InvalidField(absl::StrCat("stream_options.", item.key()), "is not supported");
      }
    }
  }
  return absl::OkStatus();
}

// metadata: at most 16 string values, keys of at most 64 characters and
// values of at most 512, as OpenAI allows.
absl::Status ParseMetadata(const Fields& f, ResponsesRequest* r) {
  if (!f.Has("metadata")) return absl::OkStatus();
  const Json& metadata = f["metadata"];
  if (!metadata.is_object() || metadata.size() > 16) {
    return InvalidField("metadata", "must be an object of at most 16 strings");
  }
  for (const auto& item : metadata.items()) {
    if (item.key().size() > 64 || !item.value().is_string() ||
        item.value().get<std::string>().size() > 512) {
      return InvalidField(absl::StrCat("metadata.", item.key()),
                          "keys have at most 64 characters and values are strings of at most 512");
    }
  }
  r->metadata = metadata;
  return absl::OkStatus();
}

absl::Status ParseScalars(const Fields& f, ResponsesRequest* r) {
  std::string instructions;
  int64_t max_output_tokens = 0;
  std::string ignored;
  for (absl::Status s :
       {f.String("model", &r->model), f.String("instructions", &instructions),
        f.String("previous_response_id", &r->previous_response_id),
        f.Integer("max_output_tokens", 1, int64_t{1} << 40, &max_output_tokens),
        f.Number("temperature", 0.0, 2.0, &r->temperature), f.Number("top_p", 1e-9, 1.0, &r->top_p),
        f.Bool("stream", &r->stream), f.Bool("store", &r->store), f.String("user", &r->user),
        f.String("service_tier", &ignored), f.String("prompt_cache_key", &ignored),
        f.String("safety_identifier", &ignored), f.Bool("attn_ignore_eos", &r->ignore_eos)}) {
    if (!s.ok()) return s;
  }
  if (f.Has("instructions")) r->instructions = std::move(instructions);
  if (f.Has("max_output_tokens")) r->max_output_tokens = max_output_tokens;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ResponsesRequest> ParseResponsesRequest(absl::string_view body) {
  absl::StatusOr<Json> parsed = ParseBody(body, KnownFields());
  if (!parsed.ok()) return parsed.status();
  const Fields f(*parsed);
  ResponsesRequest r;
  for (absl::Status s : {ParseScalars(f, &r), ParseInput(f, &r), ParseTools(f, &r),
                         ParseMetadata(f, &r), ParseText(f, &r), RefuseUnimplemented(f)}) {
    if (!s.ok()) return s;
  }
  return r;
}

Json Conversation::ToJson() const {
  Json out = {{"model", model}, {"fingerprint", fingerprint}};
  if (instructions) out["instructions"] = *instructions;
  out["tools"] = tools_json;
  out["messages"] = Json::array();
  for (const ChatMessage& m : messages) {
    out["messages"].push_back(m.json.empty() ? Json{{"role", m.role}, {"content", m.content}}
                                             : Json::parse(m.json));
  }
  out["tokens"] = tokens;
  out["text"] = text;
  return out;
}

absl::StatusOr<Conversation> Conversation::FromJson(const Json& json) {
  Conversation c;
  try {
    c.model = json.at("model").get<std::string>();
    c.fingerprint = json.at("fingerprint").get<std::string>();
    if (json.contains("instructions")) c.instructions = json["instructions"].get<std::string>();
    c.tools_json = json.at("tools").get<std::string>();
    for (const Json& id : json.at("tokens")) {
      // A number that is no integer (1e66) would not convert: refused.
      if (!id.is_number_integer()) {
        return InvalidField("previous_response_id",
                            "its stored conversation's tokens are not integers");
      }
      c.tokens.push_back(id.get<int64_t>());
    }
    c.text = json.at("text").get<std::string>();
    const Json& messages = json.at("messages");
    for (size_t i = 0; i < messages.size(); ++i) {
      absl::StatusOr<ChatMessage> m = ParseChatMessage(messages[i], "messages");
      if (!m.ok()) return m.status();
      c.messages.push_back(*std::move(m));
    }
  } catch (const Json::exception& e) {
    return InvalidField("previous_response_id",
                        absl::StrCat("its stored conversation does not parse: ", e.what()));
  }
  return c;
}

namespace {

// `status` naming `to` where it named `from`: the checks shared with Chat
// Completions name its fields, a turn names its own.
absl::Status Renamed(const absl::Status& status, const std::string& from, const std::string& to) {
  if (FieldOf(status) != from) return status;
  return FieldError(status.code(), to, status.message().substr(from.size() + 2));
}

// The prompt of a turn whose rendering is `text`: the previous state's
// tokens and the new text's when `text` extends what they are, else all of
// `text`'s (the state cache finds what it can of them).
absl::StatusOr<std::vector<int64_t>> TurnTokens(const std::string& text,
                                                const Conversation* previous,
                                                const RequestTarget& target,
                                                const std::string& fingerprint) {
  const int64_t limit = target.limits.max_prompt_tokens;
  if (previous != nullptr && previous->fingerprint == fingerprint && !previous->tokens.empty() &&
      text.size() > previous->text.size() && absl::StartsWith(text, previous->text)) {
    absl::StatusOr<std::vector<int64_t>> added =
        PromptTokens(*target.tokenizer, true, text.substr(previous->text.size()), {}, "input",
                     "input", limit, /*starts_sequence=*/false);
    if (!added.ok()) return added.status();
    std::vector<int64_t> tokens = previous->tokens;
    tokens.insert(tokens.end(), added->begin(), added->end());
    return tokens;
  }
  // A template writes the special tokens the model expects (BOS) itself.
  return PromptTokens(*target.tokenizer, true, text, {}, "input", "input", limit,
                      target.chat_template == nullptr);
}

}  // namespace

absl::StatusOr<ResponsesTurn> ToResponsesTurn(const ResponsesRequest& r,
                                              const Conversation* previous,
                                              const RequestTarget& target, const std::string& model,
                                              const std::string& fingerprint, absl::Time deadline) {
  ResponsesTurn turn;
  Conversation& c = turn.conversation;
  c.model = model;
  c.fingerprint = fingerprint;
  c.instructions = r.instructions;
  c.tools_json = r.tools_json;
  if (previous != nullptr) c.messages = previous->messages;
  c.messages.insert(c.messages.end(), r.input.begin(), r.input.end());
  std::vector<ChatMessage> rendered;
  if (r.instructions) rendered.push_back({"system", *r.instructions});
  rendered.insert(rendered.end(), c.messages.begin(), c.messages.end());
  absl::StatusOr<std::string> text =
      RenderChatFor(target.chat_template, target.chat_format, rendered, r.tools_json, true);
  if (!text.ok()) return Renamed(text.status(), "messages", "input");
  absl::StatusOr<std::vector<int64_t>> tokens = TurnTokens(*text, previous, target, fingerprint);
  if (!tokens.ok()) return tokens.status();
  c.text = *std::move(text);
  c.tokens = *tokens;

  EngineRequest& e = turn.request;
  e.protocol = Protocol::kHttp;
  e.deadline = deadline;
  e.prompt = *std::move(tokens);
  e.max_tokens = r.max_output_tokens.value_or(target.limits.default_max_tokens);
  if (target.chat_template != nullptr) {
    e.stop_token_ids = target.chat_stop_ids;
  } else {
    e.stop = ChatStops(target.chat_format);
  }
  e.sampling.temperature = r.temperature;
  e.sampling.top_p = r.top_p;
  e.sampling.seed = RandomSeed();
  e.ignore_eos = r.ignore_eos;
  const ToolForcing forcing{r.tool_choice.required, r.tool_choice.function, r.tools_json,
                            r.parallel_tool_calls, target.tool_call_format};
  auto grammar = OutputGrammar(r.constraint, forcing);
  if (!grammar.ok()) return grammar.status();
  e.grammar = *std::move(grammar);
  // The state after the reply (its last token fed) is what the next turn
  // continues: its tokens say which.
  e.return_state_tokens = true;
  absl::Status checked = CheckGeneration(target.limits, *target.tokenizer, e);
  if (!checked.ok()) return Renamed(checked, "max_tokens", "max_output_tokens");
  return turn;
}

void EndTurn(const Tokenizer& tokenizer, ChatMessage reply,
             const std::vector<int64_t>& state_tokens, Conversation* c) {
  c->messages.push_back(std::move(reply));
  const size_t prompt = c->tokens.size();
  if (state_tokens.size() < prompt) {  // no state to continue: render again next turn
    c->tokens.clear();
    c->text.clear();
    return;
  }
  // The text the model read: special tokens as written, every other token
  // as its bytes (Decode would drop a text's leading space).
  for (size_t i = prompt; i < state_tokens.size(); ++i) {
    const std::string special = tokenizer.SpecialText(state_tokens[i]);
    c->text += special.empty() ? tokenizer.TokenBytes(state_tokens[i]) : special;
  }
  c->tokens = state_tokens;
}

}  // namespace attn::serving::http
