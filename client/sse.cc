#include "client/sse.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace attn::client {

absl::Status EventSplitter::Feed(std::string_view bytes,
                                 const std::function<absl::Status(std::string_view)>& on_data) {
  pending_.append(bytes);
  size_t end;
  while ((end = pending_.find("\n\n")) != std::string::npos) {
    const std::string event = pending_.substr(0, end);
    pending_.erase(0, end + 2);
    if (!absl::StartsWith(event, "data: ")) continue;
    if (absl::Status s = on_data(std::string_view(event).substr(6)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CompletionChunkTokens(std::string_view data) {
  if (data == "[DONE]") return 0;
  const nlohmann::json chunk = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!chunk.is_object()) return absl::DataLossError("an event whose data is no JSON object");
  if (chunk.contains("error"))
    return absl::UnknownError(absl::StrCat("error: ", chunk["error"].dump()));
  const auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array()) {
    return absl::DataLossError("a chunk without a choices list");
  }
  if (choices->empty()) return 0;  // the usage chunk
  const nlohmann::json& choice = choices->front();
  if (!choice.is_object()) return absl::DataLossError("a choice that is no object");
  const auto logprobs = choice.find("logprobs");
  if (logprobs == choice.end() || !logprobs->is_object()) return 0;
  const auto tokens = logprobs->find("tokens");
  if (tokens == logprobs->end() || !tokens->is_array()) return 0;
  return static_cast<int64_t>(tokens->size());
}

}  // namespace attn::client
