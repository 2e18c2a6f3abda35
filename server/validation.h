// Turning API requests into engine requests, within a model's RequestLimits
// (server/engine.h). Every rejection is kInvalidArgument in the one format
// of util/field_error.h ("top_p: 1.5 is outside (0, 1]"), so a client knows
// what to fix.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "attn/v1/text_generation.pb.h"
#include "server/engine.h"

namespace attn {
class Tokenizer;
}

namespace attn::serving {

// The prompt's ids from `text` or `ids` (exactly one), checked against the
// vocabulary and the limits. `text_field`/`ids_field` name the fields.
absl::StatusOr<std::vector<int64_t>> PromptTokens(const Tokenizer& tokenizer, bool has_text,
                                                  const std::string& text,
                                                  const std::vector<int64_t>& ids,
                                                  const std::string& text_field,
                                                  const std::string& ids_field, int64_t max_tokens);

absl::StatusOr<EngineRequest> ToEngineRequest(const attn::v1::GenerateRequest& request,
                                              const Tokenizer& tokenizer,
                                              const RequestLimits& limits, absl::Time deadline);

absl::StatusOr<EngineRequest> ToScoreRequest(const attn::v1::ScoreRequest& request,
                                             const Tokenizer& tokenizer,
                                             const RequestLimits& limits, absl::Time deadline);

// Token ids to detokenize: each must be in the vocabulary.
absl::Status CheckTokenIds(const Tokenizer& tokenizer, const std::vector<int64_t>& ids,
                           const std::string& field);

}  // namespace attn::serving
