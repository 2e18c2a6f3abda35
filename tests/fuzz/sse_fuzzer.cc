// attnctl bench's reading of a streamed completion (client/sse.h): a
// response body split into events, cut at a point the input chooses, and
// each event's data counted as a chunk. The events must be the same cut or
// whole; a count is never negative; nothing crashes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "client/sse.h"

namespace {

std::vector<std::string> Events(const std::vector<std::string_view>& pieces) {
  attn::client::EventSplitter splitter;
  std::vector<std::string> events;
  for (std::string_view piece : pieces) {
    const absl::Status status = splitter.Feed(piece, [&](std::string_view data) {
      events.emplace_back(data);
      const absl::StatusOr<int64_t> tokens = attn::client::CompletionChunkTokens(data);
      if (tokens.ok() && *tokens < 0) std::abort();
      return absl::OkStatus();
    });
    if (!status.ok()) std::abort();
  }
  return events;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t cut = data[0] % (body.size() + 1);
  if (Events({body}) != Events({body.substr(0, cut), body.substr(cut)})) std::abort();
  return 0;
}
