#include "server/core/validation.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "model/text/chat_template.h"
#include "model/text/tokenizer.h"
#include "model/text/tool_calls.h"
#include "server/core/structured.h"
#include "server/state/state_blob.h"
#include "util/field_error.h"
#include "util/utf8.h"

namespace attn::serving {
namespace {

absl::StatusOr<SamplingOptions> Sampling(const attn::v1::GenerateRequest& request) {
  SamplingOptions options;
  options.temperature = request.has_temperature() ? request.temperature() : 1.0;
  options.top_k = request.top_k();
  options.top_p = request.has_top_p() ? request.top_p() : 1.0;
  options.repetition_penalty =
      request.has_repetition_penalty() ? request.repetition_penalty() : 1.0;
  options.presence_penalty = request.presence_penalty();
  options.frequency_penalty = request.frequency_penalty();
  for (const auto& [token, bias] : request.logit_bias())
    options.logit_bias.emplace_back(token, bias);
  std::sort(options.logit_bias.begin(), options.logit_bias.end());
  options.top_logprobs = request.top_logprobs();
  options.seed = request.has_seed() ? request.seed() : RandomSeed();
  if (std::isnan(options.temperature)) return InvalidField("temperature", "is NaN");
  if (std::isnan(options.top_p)) return InvalidField("top_p", "is NaN");
  if (std::isnan(options.repetition_penalty)) return InvalidField("repetition_penalty", "is NaN");
  return options;
}

}  // namespace

uint64_t RandomSeed() {
  ABSL_CONST_INIT static absl::Mutex mu(absl::kConstInit);
  absl::MutexLock lock(&mu);
  static std::random_device device;  // not thread-safe: used under mu
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

absl::Status CheckTokenIds(const Tokenizer& tokenizer, const std::vector<int64_t>& ids,
                           const std::string& field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!tokenizer.IsValidId(ids[i])) {
      return InvalidField(absl::StrCat(field, "[", i, "]"),
                          absl::StrCat(ids[i], " is not a token id (the vocabulary has ",
                                       tokenizer.vocab_size(), " tokens)"));
    }
  }
  return absl::OkStatus();
}

std::string DetokenizeText(const Tokenizer& tokenizer, const std::vector<int64_t>& ids,
                           bool clean_up_tokenization_spaces) {
  std::string text = tokenizer.Decode(ids, /*keep_special_tokens=*/true);
  return clean_up_tokenization_spaces ? CleanUpTokenizationSpaces(text) : text;
}

namespace {

// The turns a built-in format renders: tool turns written Hermes-style,
// then only system, user and assistant roles.
absl::StatusOr<std::vector<ChatMessage>> ChatFormatTurns(const std::vector<ChatMessage>& messages,
                                                         const std::string& tools_json) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return InvalidField(absl::StrCat("messages[", i, "].role"),
                          absl::StrCat("\"", role, "\" is not system, user, assistant or tool"));
    }
  }
  return HermesToolTurns(messages, tools_json);
}

}  // namespace

absl::StatusOr<std::string> ContinueChatFor(ChatFormat format,
                                            const std::vector<ChatMessage>& messages,
                                            const std::string& tools_json, bool reply_stopped) {
  absl::StatusOr<std::vector<ChatMessage>> turns = ChatFormatTurns(messages, tools_json);
  if (!turns.ok()) return turns.status();
  return ContinueChat(format, *turns, reply_stopped);
}

absl::StatusOr<std::string> RenderChatFor(const ChatTemplate* chat_template, ChatFormat format,
                                          const std::vector<ChatMessage>& messages,
                                          const std::string& tools_json,
                                          bool add_generation_prompt) {
  if (chat_template == nullptr) {
    absl::StatusOr<std::vector<ChatMessage>> turns = ChatFormatTurns(messages, tools_json);
    if (!turns.ok()) return turns.status();
    return RenderChat(format, *turns, add_generation_prompt);
  }
  absl::StatusOr<std::string> text =
      chat_template->Render(messages, add_generation_prompt, tools_json);
  // The template's refusals (raise_exception) and limits answer the
  // conversation sent, as vLLM's 400 does.
  if (!text.ok()) return InvalidField("messages", text.status().message());
  return text;
}

absl::StatusOr<std::vector<int64_t>> TokenizeFor(const Tokenizer& tokenizer,
                                                 const ChatTemplate* chat_template,
                                                 const std::string& chat_format,
                                                 const TokenizeInput& input) {
  const bool chat = !input.messages.empty();
  if (chat == input.text.has_value()) {
    return InvalidField(chat ? "messages" : "text",
                        chat ? "give text or messages, not both" : "missing (or give messages)");
  }
  std::string text;
  if (chat) {
    ChatFormat format = ChatFormat::kPlain;
    ParseChatFormat(chat_format, &format);
    absl::StatusOr<std::string> rendered = RenderChatFor(
        chat_template, format, input.messages, input.tools_json, input.add_generation_prompt);
    if (!rendered.ok()) return rendered.status();
    text = *std::move(rendered);
  } else {
    text = *input.text;
  }
  if (!IsValidUtf8(text)) return InvalidField(chat ? "messages" : "text", "is not valid UTF-8");
  return tokenizer.Encode(text, input.add_special_tokens.value_or(!chat));
}

absl::StatusOr<std::vector<int64_t>> PromptTokens(const Tokenizer& tokenizer, bool has_text,
                                                  const std::string& text,
                                                  const std::vector<int64_t>& ids,
                                                  const std::string& text_field,
                                                  const std::string& ids_field, int64_t max_tokens,
                                                  bool starts_sequence) {
  if (has_text && !text.empty() && !ids.empty()) {
    return InvalidField(absl::StrCat(text_field, ", ", ids_field), "give one of the two, not both");
  }
  std::vector<int64_t> tokens;
  if (!ids.empty()) {
    absl::Status status = CheckTokenIds(tokenizer, ids, ids_field);
    if (!status.ok()) return status;
    tokens = ids;
  } else {
    if (text.empty()) {
      return InvalidField(text_field, absl::StrCat("empty; give text in ", text_field,
                                                   " or token ids in ", ids_field));
    }
    if (!IsValidUtf8(text)) return InvalidField(text_field, "is not valid UTF-8");
    tokens = tokenizer.Encode(text, starts_sequence);
  }
  if (static_cast<int64_t>(tokens.size()) > max_tokens) {
    return InvalidField(text_field, absl::StrCat(tokens.size(), " tokens, more than the limit of ",
                                                 max_tokens, " (--max_prompt_tokens)"));
  }
  return tokens;
}

absl::Status CheckGeneration(const RequestLimits& limits, const Tokenizer& tokenizer,
                             const EngineRequest& request) {
  if (absl::Status sampling = request.sampling.Validate(); !sampling.ok()) return sampling;
  for (const auto& [token, bias] : request.sampling.logit_bias) {
    if (!tokenizer.IsValidId(token)) {
      return InvalidField(absl::StrCat("logit_bias[", token, "]"),
                          absl::StrCat(token, " is not a token id (the vocabulary has ",
                                       tokenizer.vocab_size(), " tokens)"));
    }
  }
  if (request.max_tokens < 1 || request.max_tokens > limits.max_tokens) {
    return InvalidField("max_tokens", absl::StrCat(request.max_tokens, " is outside 1 to ",
                                                   limits.max_tokens, " (--max_tokens)"));
  }
  const auto length = static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
  if (limits.max_context > 0 && length > limits.max_context) {
    return InvalidField(
        "max_tokens",
        absl::StrCat("the prompt's ", request.prompt.size(), " tokens plus ", request.max_tokens,
                     " exceed the model's context of ", limits.max_context, " tokens"));
  }
  if (static_cast<int64_t>(request.stop.size()) > limits.max_stop_strings) {
    return InvalidField(
        "stop", absl::StrCat(request.stop.size(), " strings, at most ", limits.max_stop_strings));
  }
  for (size_t i = 0; i < request.stop.size(); ++i) {
    const std::string field = absl::StrCat("stop[", i, "]");
    if (request.stop[i].empty()) return InvalidField(field, "is empty");
    if (!IsValidUtf8(request.stop[i])) return InvalidField(field, "is not valid UTF-8");
  }
  return absl::OkStatus();
}

absl::Status ApplyStartState(const std::string& blob, const StateTarget& target,
                             const RequestLimits& limits, EngineRequest* request) {
  if (static_cast<int64_t>(blob.size()) > target.budget_bytes) {
    return FieldError(absl::StatusCode::kResourceExhausted, "state", blob.size(),
                      " bytes, more than the ", target.budget_bytes,
                      " bytes of state the server holds for the model's requests "
                      "(--max_state_bytes)");
  }
  absl::StatusOr<StateBlob> decoded = DecodeStateBlob(blob);
  if (!decoded.ok()) return decoded.status();
  if (decoded->fingerprint != target.fingerprint) {
    return FieldError(absl::StatusCode::kFailedPrecondition, "state", "it holds a state of model ",
                      decoded->fingerprint, ", but ", target.model, " is ", target.fingerprint,
                      "; send it to a server hosting that model, or start without it");
  }
  const auto prompt = static_cast<int64_t>(request->prompt.size());
  if (limits.max_context > 0 && decoded->tokens + prompt >= limits.max_context) {
    return InvalidField(
        "state",
        absl::StrCat("holds ", decoded->tokens, " tokens; with the prompt's ", prompt,
                     " they leave no room in the model's context of ", limits.max_context));
  }
  request->start_tokens = decoded->tokens;
  request->start_state = std::move(decoded->row);
  return absl::OkStatus();
}

absl::Status ApplyInitialState(const std::string& name, const std::string& model,
                               const InitialStates& states, EngineRequest* request) {
  if (request->start_state) {
    return InvalidField("initial_state", "give state or initial_state, not both");
  }
  auto found = states.find(name);
  if (found == states.end()) {
    std::vector<std::string> names;
    for (const auto& [known, state] : states) names.push_back(known);
    return FieldError(absl::StatusCode::kNotFound, "initial_state", "\"", name, "\" is not one of ",
                      model, "'s initial states (",
                      names.empty() ? "it has none" : absl::StrJoin(names, ", "), ")");
  }
  request->initial_state = found->second.row;
  request->cache_origin = found->second.origin;
  return absl::OkStatus();
}

namespace {

// GenerateRequest.structured as a constraint; errors name its field.
absl::StatusOr<RequestConstraint> ConstraintOf(const attn::v1::OutputConstraint& c) {
  using Kind = attn::v1::OutputConstraint::KindCase;
  switch (c.kind_case()) {
    case Kind::kJsonObject:
      if (!c.json_object()) break;
      return RequestConstraint{grammar::OutputConstraint::JsonObject(), "structured.json_object"};
    case Kind::kJsonSchema: {
      auto schema = nlohmann::ordered_json::parse(c.json_schema(), nullptr, false);
      if (schema.is_discarded() || !(schema.is_object() || schema.is_boolean())) {
        return InvalidField("structured.json_schema", "is not a JSON Schema object");
      }
      return RequestConstraint{grammar::OutputConstraint::JsonSchema(std::move(schema)),
                               "structured.json_schema"};
    }
    case Kind::kRegex:
      return RequestConstraint{grammar::OutputConstraint::Regex(c.regex()), "structured.regex"};
    case Kind::kChoice:
      if (c.choice().choices().empty()) {
        return InvalidField("structured.choice", "needs at least one choice");
      }
      return RequestConstraint{grammar::OutputConstraint::Choice(
                                   {c.choice().choices().begin(), c.choice().choices().end()}),
                               "structured.choice"};
    case Kind::kGrammar:
      return RequestConstraint{grammar::OutputConstraint::Gbnf(c.grammar()), "structured.grammar"};
    default:
      break;
  }
  return InvalidField("structured",
                      "set one of json_object (true), json_schema, regex, choice, grammar");
}

}  // namespace

absl::StatusOr<EngineRequest> ToEngineRequest(const attn::v1::GenerateRequest& request,
                                              const Tokenizer& tokenizer,
                                              const RequestLimits& limits, absl::Time deadline) {
  EngineRequest out;
  out.deadline = deadline;
  auto prompt =
      PromptTokens(tokenizer, request.has_prompt(), request.prompt(),
                   {request.prompt_token_ids().begin(), request.prompt_token_ids().end()}, "prompt",
                   "prompt_token_ids", limits.max_prompt_tokens, !request.has_state());
  if (!prompt.ok()) return prompt.status();
  out.prompt = std::move(*prompt);
  out.max_tokens = request.has_max_tokens() ? request.max_tokens() : limits.default_max_tokens;
  auto sampling = Sampling(request);
  if (!sampling.ok()) return sampling.status();
  out.sampling = *sampling;
  out.stop.assign(request.stop().begin(), request.stop().end());
  out.logprobs = request.logprobs() || request.top_logprobs() > 0;
  if (absl::Status checked = CheckGeneration(limits, tokenizer, out); !checked.ok()) {
    return checked;
  }
  out.ignore_eos = request.ignore_eos();
  if (request.has_structured()) {
    auto constraint = ConstraintOf(request.structured());
    if (!constraint.ok()) return constraint.status();
    auto grammar = CompileConstraint(*constraint);
    if (!grammar.ok()) return grammar.status();
    out.grammar = *std::move(grammar);
  }
  return out;
}

absl::StatusOr<EngineRequest> ToScoreRequest(const attn::v1::ScoreRequest& request,
                                             const Tokenizer& tokenizer,
                                             const RequestLimits& limits, absl::Time deadline) {
  EngineRequest out;
  out.kind = EngineRequest::Kind::kScore;
  out.deadline = deadline;
  auto tokens = PromptTokens(tokenizer, request.has_text(), request.text(),
                             {request.token_ids().begin(), request.token_ids().end()}, "text",
                             "token_ids", limits.max_prompt_tokens, /*starts_sequence=*/true);
  if (!tokens.ok()) return tokens.status();
  if (tokens->size() < 2) {
    return InvalidField("text", "needs at least 2 tokens: the first one has no context to score");
  }
  if (limits.max_context > 0 && static_cast<int64_t>(tokens->size()) > limits.max_context) {
    return InvalidField(
        "text",
        absl::StrCat(tokens->size(), " tokens exceed the model's context of ", limits.max_context));
  }
  out.prompt = std::move(*tokens);
  out.max_tokens = 0;
  return out;
}

}  // namespace attn::serving
