// A minimal HTTP/1.1 client for Server-Sent Events (OpenAI's streaming
// responses), on Boost.Beast: attnctl bench's load over the HTTP API.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace attn::client {

// POSTs the JSON `body` to http://`address``target` (address host:port,
// plain HTTP; `api_key`, when not empty, as "authorization: Bearer") and
// calls on_data with each event's data ("data: " lines, as they arrive),
// until the response ends or on_data returns an error, which is returned.
// A status other than 200 is an error carrying the response's body:
// kResourceExhausted for 429 (the server's queue is full), else kUnknown.
absl::Status PostEventStream(const std::string& address, const std::string& target,
                             const std::string& body, const std::string& api_key,
                             const std::function<absl::Status(std::string_view data)>& on_data);

}  // namespace attn::client
