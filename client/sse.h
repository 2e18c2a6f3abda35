// Server-Sent Events as OpenAI's streaming responses send them: a response
// body, in whatever pieces it arrives, split into its events' data, and a
// streamed completion chunk's token count. attnctl bench's HTTP load reads
// them (event_stream.h); no network here, so a fuzzer drives both.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace attn::client {

class EventSplitter {
 public:
  // Appends `bytes` and calls on_data with the data of each event it
  // completes (a "data: " line; an event ends at a blank line), in order;
  // other fields and comments are skipped. Returns on_data's first error.
  // The events are the same however the body is cut into pieces.
  absl::Status Feed(std::string_view bytes,
                    const std::function<absl::Status(std::string_view data)>& on_data);
  // What has arrived since the last complete event.
  const std::string& pending() const { return pending_; }

 private:
  std::string pending_;
};

// The tokens a streamed completion chunk (an event's data) carries: the
// length of choices[0].logprobs.tokens (the request asks for logprobs, so
// that tokens whose text is empty count too); 0 for "[DONE]", the usage
// chunk and a chunk without logprobs. kUnknown carrying the server's error
// object for an error event; kDataLoss for data that is no such chunk.
absl::StatusOr<int64_t> CompletionChunkTokens(std::string_view data);

}  // namespace attn::client
