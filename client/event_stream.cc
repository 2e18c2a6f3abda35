#include "client/event_stream.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/str_cat.h"
#include "client/sse.h"

namespace attn::client {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

absl::Status Failed(const char* what, const beast::error_code& error) {
  return absl::UnavailableError(absl::StrCat("HTTP ", what, ": ", error.message()));
}

}  // namespace

absl::Status PostEventStream(const std::string& address, const std::string& target,
                             const std::string& body, const std::string& api_key,
                             const std::function<absl::Status(std::string_view data)>& on_data) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--http: \"", address, "\" is not host:port"));
  }
  const std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  boost::asio::io_context io;
  beast::tcp_stream stream(io);
  beast::error_code error;
  const auto endpoints = tcp::resolver(io).resolve(host, port, error);
  if (error) return Failed("resolve", error);
  stream.connect(endpoints, error);
  if (error) return Failed("connect", error);
  http::request<http::string_body> request{http::verb::post, target, 11};
  request.set(http::field::host, host);
  request.set(http::field::content_type, "application/json");
  if (!api_key.empty()) request.set(http::field::authorization, "Bearer " + api_key);
  request.body() = body;
  request.prepare_payload();
  http::write(stream, request, error);
  if (error) return Failed("write", error);
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  http::read_header(stream, buffer, parser, error);
  if (error) return Failed("read", error);
  const unsigned status = parser.get().result_int();
  EventSplitter events;
  std::string refusal;  // the body of a status other than 200
  char chunk[4096];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    http::read_some(stream, buffer, parser, error);
    if (error == http::error::need_buffer) error = {};
    if (error) return Failed("read", error);
    const std::string_view got(chunk, sizeof chunk - parser.get().body().size);
    if (status != 200) {
      refusal.append(got);
    } else if (absl::Status s = events.Feed(got, on_data); !s.ok()) {
      return s;
    }
  }
  if (status == 429) return absl::ResourceExhaustedError(absl::StrCat("HTTP 429: ", refusal));
  if (status != 200) return absl::UnknownError(absl::StrCat("HTTP ", status, ": ", refusal));
  return absl::OkStatus();
}

}  // namespace attn::client
