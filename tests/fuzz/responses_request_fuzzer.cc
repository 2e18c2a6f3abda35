// Responses API bodies (server/http/responses_request.h): the input parsed,
// and whatever parses made into a turn over a bytes tokenizer, in the plain
// format and through a chat template, then into the turn after it, as a
// previous_response_id chain does. Every body is refused with a status that
// names a field, or becomes an engine request within the limits whose
// prompt, after a stored turn of the same model, starts with that turn's
// state tokens or is the whole conversation again. The same bytes as a
// stored conversation record: refused, or read back unchanged.
#include <cstdint>
#include <string>

#include "server/http/openai_response.h"
#include "server/http/responses_request.h"
#include "tests/fuzz/chat_fuzz_target.h"

namespace {

using attn::serving::http::Conversation;
using attn::serving::http::Json;

const attn::Tokenizer& Bytes() { return attn::fuzzing::BytesTokenizer(); }
const attn::ChatTemplate& Template() { return attn::fuzzing::EveryKeyTemplate(); }

void CheckRefusal(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument || status.message().empty()) {
    __builtin_trap();
  }
  const auto error = attn::serving::http::ErrorObject(status);
  if (!error["error"]["param"].is_string()) __builtin_trap();
}

void CheckRequest(const attn::serving::EngineRequest& r,
                  const attn::serving::http::RequestTarget& target) {
  if (r.prompt.empty()) __builtin_trap();
  for (int64_t id : r.prompt) {
    if (!Bytes().IsValidId(id)) __builtin_trap();
  }
  if (r.max_tokens < 1 || r.max_tokens > target.limits.max_tokens) __builtin_trap();
  // The next turn continues from the tokens; the state stays in the server.
  if (!r.return_state_tokens || r.return_state) __builtin_trap();
}

// Two turns of `parsed`: the second after the first's reply.
void CheckTurns(const attn::serving::http::ResponsesRequest& parsed,
                const attn::serving::http::RequestTarget& target) {
  using attn::serving::http::ToResponsesTurn;
  auto first = ToResponsesTurn(parsed, nullptr, target, "m", "f", absl::InfiniteFuture());
  if (!first.ok()) return CheckRefusal(first.status());
  CheckRequest(first->request, target);
  std::vector<int64_t> state = first->request.prompt;
  state.insert(state.end(), {'o', 'k', 256});
  Conversation stored = first->conversation;
  EndTurn(Bytes(), {"assistant", "ok"}, state, &stored);
  if (stored.tokens != state) __builtin_trap();
  auto second = ToResponsesTurn(parsed, &stored, target, "m", "f", absl::InfiniteFuture());
  if (!second.ok()) return CheckRefusal(second.status());
  CheckRequest(second->request, target);
  const std::vector<int64_t>& prompt = second->request.prompt;
  const bool continues =
      prompt.size() > state.size() && std::equal(state.begin(), state.end(), prompt.begin());
  if (!continues && prompt != Bytes().Encode(second->conversation.text, !target.chat_template)) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attn::serving::http;
  const std::string body(reinterpret_cast<const char*>(data), size);
  RequestTarget target;
  target.tokenizer = &Bytes();
  target.limits.max_prompt_tokens = 256;
  target.limits.max_tokens = 32;
  target.limits.default_max_tokens = 16;
  target.chat_stop_ids = {256};
  absl::StatusOr<ResponsesRequest> parsed = ParseResponsesRequest(body);
  if (!parsed.ok()) {
    CheckRefusal(parsed.status());
  } else {
    CheckTurns(*parsed, target);
    target.chat_template = &Template();
    CheckTurns(*parsed, target);
  }
  const Json json = Json::parse(body, nullptr, false);
  if (json.is_discarded()) return 0;
  absl::StatusOr<Conversation> record = Conversation::FromJson(json);
  if (!record.ok()) {
    CheckRefusal(record.status());
    return 0;
  }
  absl::StatusOr<Conversation> again = Conversation::FromJson(record->ToJson());
  if (!again.ok() || again->ToJson() != record->ToJson()) __builtin_trap();
  return 0;
}
