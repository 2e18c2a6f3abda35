// Turning API requests into engine requests, within a model's RequestLimits
// (server/engine/engine.h). The one place that checks a request against the limits
// and fills in its defaults (max_tokens, sampling, the tokens a start state
// already holds); the engine only asserts what this guarantees. Every
// rejection of a field is kInvalidArgument in the one format of
// util/field_error.h ("top_p: 1.5 is outside (0, 1]"), so a client knows
// what to fix. Each protocol (gRPC here, others beside it) parses its own
// request and ends with CheckGeneration, so all of them apply the same
// rules.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "attn/v1/text_generation.pb.h"
#include "model/text/chat_format.h"
#include "server/engine/engine.h"
#include "server/state/initial_states.h"

namespace attn {
class ChatTemplate;
class Tokenizer;
}  // namespace attn

namespace attn::serving {

// The prompt's ids from `text` or `ids` (exactly one), checked against the
// vocabulary and the limits. `text_field`/`ids_field` name the fields.
// starts_sequence: the text begins a sequence rather than continuing a
// state, so it gets the tokens a tokenizer.json's template puts before a
// text (Llama's BOS), as Hugging Face's encode adds them; ids are taken as
// they are.
absl::StatusOr<std::vector<int64_t>> PromptTokens(const Tokenizer& tokenizer, bool has_text,
                                                  const std::string& text,
                                                  const std::vector<int64_t>& ids,
                                                  const std::string& text_field,
                                                  const std::string& ids_field, int64_t max_tokens,
                                                  bool starts_sequence);

// The checks every generation request passes whatever protocol it came in:
// the sampling options (SamplingOptions::Validate, and logit_bias naming
// tokens of the vocabulary), max_tokens within 1 to limits.max_tokens (the caller fills in
// limits.default_max_tokens when the request left it unset), the prompt plus
// max_tokens within the model's context, and the stop strings (at most
// limits.max_stop_strings, none empty, all UTF-8). `request->prompt` must
// already be checked (PromptTokens).
absl::Status CheckGeneration(const RequestLimits& limits, const Tokenizer& tokenizer,
                             const EngineRequest& request);

// The model a client-held state must belong to (GenerateRequest.state), and
// the most state bytes the model's requests may hold (its budget).
struct StateTarget {
  std::string model;
  std::string fingerprint;  // server/state/state_blob.h
  int64_t budget_bytes = 0;
};

// Makes `request` continue the state in `blob`: kResourceExhausted for a
// blob larger than the budget, kInvalidArgument for bytes that are not a
// state (or one whose tokens leave the prompt no room in the model's
// context: they count against it), kFailedPrecondition for a state of
// another model.
absl::Status ApplyStartState(const std::string& blob, const StateTarget& target,
                             const RequestLimits& limits, EngineRequest* request);

// Makes `request` start from the initial state `name` of `model`
// (GenerateRequest.initial_state): kNotFound naming it and the model's
// initial states when it has none of that name; kInvalidArgument when the
// request also continues a client's state.
absl::Status ApplyInitialState(const std::string& name, const std::string& model,
                               const InitialStates& states, EngineRequest* request);

// A seed for a request that names none: random, different every call.
uint64_t RandomSeed();

// A GenerateRequest without its state (see ApplyStartState), checked and
// with its defaults filled in.
absl::StatusOr<EngineRequest> ToEngineRequest(const attn::v1::GenerateRequest& request,
                                              const Tokenizer& tokenizer,
                                              const RequestLimits& limits, absl::Time deadline);

absl::StatusOr<EngineRequest> ToScoreRequest(const attn::v1::ScoreRequest& request,
                                             const Tokenizer& tokenizer,
                                             const RequestLimits& limits, absl::Time deadline);

// What a tokenize request asks, whatever protocol brought it.
struct TokenizeInput {
  std::optional<std::string> text;
  std::vector<ChatMessage> messages;  // instead of text
  std::string tools_json;             // with messages: a JSON array of function tools, or ""
  bool add_generation_prompt = true;  // with messages
  // Default: true for text, false for messages (the rendered chat already
  // starts as the model expects).
  std::optional<bool> add_special_tokens;
};

// The prompt text of a chat with `tools_json` (a JSON array of function
// tools; empty for none): `chat_template`'s rendering when the model has
// one (its own errors and refusals are kInvalidArgument naming "messages"),
// else `format`'s, tools and tool turns written Hermes-style
// (HermesToolTurns in model/text/tool_calls.h).
absl::StatusOr<std::string> RenderChatFor(const ChatTemplate* chat_template, ChatFormat format,
                                          const std::vector<ChatMessage>& messages,
                                          const std::string& tools_json,
                                          bool add_generation_prompt);

// ContinueChat (chat_format.h) with tool turns written as RenderChatFor
// writes them for a built-in format.
absl::StatusOr<std::string> ContinueChatFor(ChatFormat format,
                                            const std::vector<ChatMessage>& messages,
                                            const std::string& tools_json, bool reply_stopped);

// The ids of `input` on a model's tokenizer and chat template (null: none)
// or format: kInvalidArgument naming "text" or "messages" when both or
// neither are given, text that is not UTF-8, or what RenderChatFor refuses.
absl::StatusOr<std::vector<int64_t>> TokenizeFor(const Tokenizer& tokenizer,
                                                 const ChatTemplate* chat_template,
                                                 const std::string& chat_format,
                                                 const TokenizeInput& input);

// The text of token ids as /detokenize gives it (vLLM's): special tokens
// keep their text, and spaces before punctuation and contractions are
// cleaned up when the model's tokenizer_config.json asks for it
// (clean_up_tokenization_spaces).
std::string DetokenizeText(const Tokenizer& tokenizer, const std::vector<int64_t>& ids,
                           bool clean_up_tokenization_spaces);

// Token ids to detokenize: each must be in the vocabulary.
absl::Status CheckTokenIds(const Tokenizer& tokenizer, const std::vector<int64_t>& ids,
                           const std::string& field);

}  // namespace attn::serving
