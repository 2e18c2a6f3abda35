// OpenAI request bodies (server/http/openai_request.h): the input parsed as
// a Completions and as a Chat Completions body, and whatever parses made
// into engine requests over a bytes tokenizer, as the HTTP API does. Every
// body is refused with a status that names a field, or becomes one engine
// request per choice within the limits; the error object is built for
// every refusal. A chat is made into engine requests twice: in the plain
// format (tools written Hermes-style) and through a chat template that
// renders every message key, tools and tool calls. The same body as a
// /tokenize and a /detokenize request: refused by field, or tokenized (its
// ids valid) and detokenized.
#include <cstdint>
#include <string>

#include "absl/time/clock.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"
#include "tests/fuzz/chat_fuzz_target.h"

namespace {

const attn::Tokenizer& Bytes() { return attn::fuzzing::BytesTokenizer(); }
const attn::ChatTemplate& Template() { return attn::fuzzing::EveryKeyTemplate(); }

void CheckRefusal(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kResourceExhausted:
      break;
    default:
      __builtin_trap();
  }
  if (status.message().empty()) __builtin_trap();
  const auto error = attn::serving::http::ErrorObject(status);
  if (!error["error"]["message"].is_string()) __builtin_trap();
}

// Engine requests from a parsed body on `target`: one per choice, within
// the limits, or a refusal that names a field.
void CheckConversion(const attn::serving::http::OpenAiRequest& parsed,
                     const attn::serving::http::RequestTarget& target) {
  auto requests = ToEngineRequests(parsed, target, absl::InfiniteFuture());
  if (!requests.ok()) return CheckRefusal(requests.status());
  if (static_cast<int64_t>(requests->size()) != parsed.n) __builtin_trap();
  for (const attn::serving::EngineRequest& r : *requests) {
    const auto prompt = static_cast<int64_t>(r.prompt.size());
    if (prompt < 1 || prompt > target.limits.max_prompt_tokens) __builtin_trap();
    for (int64_t id : r.prompt) {
      if (!Bytes().IsValidId(id)) __builtin_trap();
    }
    if (r.max_tokens < 1 || r.max_tokens > target.limits.max_tokens) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attn::serving::http;
  const std::string body(reinterpret_cast<const char*>(data), size);
  RequestTarget target;
  target.tokenizer = &Bytes();
  target.limits.max_prompt_tokens = 64;
  target.limits.max_tokens = 32;
  target.limits.max_context = 128;
  target.state = {"fuzz", "fingerprint", 1 << 20};
  for (ApiKind kind : {ApiKind::kCompletions, ApiKind::kChat}) {
    absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(kind, body);
    if (!parsed.ok()) {
      CheckRefusal(parsed.status());
      continue;
    }
    if (parsed->n < 1 || parsed->n > kMaxChoices) __builtin_trap();
    for (const attn::ChatTemplate* chat : {static_cast<const attn::ChatTemplate*>(nullptr),
                                           kind == ApiKind::kChat ? &Template() : nullptr}) {
      if (chat == nullptr && target.chat_template != nullptr) continue;
      target.chat_template = chat;
      CheckConversion(*parsed, target);
    }
    target.chat_template = nullptr;
  }
  if (auto tokenize = ParseTokenizeRequest(body); !tokenize.ok()) {
    CheckRefusal(tokenize.status());
  } else if (auto ids = attn::serving::TokenizeFor(Bytes(), &Template(), "plain", tokenize->input);
             !ids.ok()) {
    CheckRefusal(ids.status());
  } else {
    for (int64_t id : *ids) {
      if (!Bytes().IsValidId(id)) __builtin_trap();
    }
  }
  if (auto detokenize = ParseDetokenizeRequest(body); !detokenize.ok()) {
    CheckRefusal(detokenize.status());
  } else if (absl::Status valid =
                 attn::serving::CheckTokenIds(Bytes(), detokenize->tokens, "tokens");
             !valid.ok()) {
    CheckRefusal(valid);
  } else {
    (void)Bytes().Decode(detokenize->tokens, /*keep_special_tokens=*/true);
  }
  return 0;
}
