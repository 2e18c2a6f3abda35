// Request validation from raw protobuf bytes: a GenerateRequest and a
// ScoreRequest parsed from the input and checked as the service checks them
// (server/core/validation.h), over a bytes tokenizer. Every request is either
// refused with INVALID_ARGUMENT or becomes an engine request within the
// limits.
#include <cstdint>
#include <string>

#include "absl/time/clock.h"
#include "attn/v1/text_generation.pb.h"
#include "model/text/tokenizer.h"
#include "server/core/validation.h"

namespace {

const attn::Tokenizer& Bytes() {
  static const auto* tokenizer = new attn::Tokenizer(*attn::Tokenizer::Bytes(300, 256));
  return *tokenizer;
}

void CheckOutcome(const absl::StatusOr<attn::serving::EngineRequest>& request,
                  const attn::serving::RequestLimits& limits) {
  if (!request.ok()) {
    if (request.status().code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
    return;
  }
  const auto prompt = static_cast<int64_t>(request->prompt.size());
  if (prompt < 1 || prompt > limits.max_prompt_tokens) __builtin_trap();
  for (int64_t id : request->prompt) {
    if (!Bytes().IsValidId(id)) __builtin_trap();
  }
  if (request->max_tokens < 0 || request->max_tokens > limits.max_tokens) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  attn::serving::RequestLimits limits;
  limits.max_prompt_tokens = 64;
  limits.max_tokens = 32;
  limits.max_context = 128;
  const absl::Time deadline = absl::InfiniteFuture();
  attn::v1::GenerateRequest generate;
  if (generate.ParseFromArray(data, static_cast<int>(size))) {
    CheckOutcome(attn::serving::ToEngineRequest(generate, Bytes(), limits, deadline), limits);
  }
  attn::v1::ScoreRequest score;
  if (score.ParseFromArray(data, static_cast<int>(size))) {
    CheckOutcome(attn::serving::ToScoreRequest(score, Bytes(), limits, deadline), limits);
  }
  return 0;
}
