// An HTTP/1.1 server for the OpenAI-compatible API and the metrics port, on
// Boost.Beast's asynchronous sockets: a few I/O threads hold any number of
// connections, so idle keep-alive clients and clients that send their
// request a byte at a time cost memory, never a thread, and never delay a
// scrape or a new request. Each connection has deadlines: the request head
// and body must arrive within kRequestTimeout of the first byte, an idle
// keep-alive connection closes after kIdleTimeout, and a response the client
// does not read within kWriteTimeout is abandoned. A body over
// kMaxBodyBytes gets 413 before it is read, a head over kMaxHeadBytes 431.
//
// Handlers run on an I/O thread and must not block. A handler answers once,
// with a whole response (Reply::Send) or a stream (Reply::Stream): the
// server then pulls the stream's chunks whenever the previous write is done
// and the source has woken it, so a slow reader holds back its producer
// instead of growing a buffer. While a stream is open the server watches
// the socket: a client that disconnects cancels its source at once.
//
// TLS: with a certificate and key every connection is TLS; the files are
// read again every reload_seconds for new connections, as gRPC's are.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace attn::serving::http {

inline constexpr int64_t kMaxBodyBytes = int64_t{4} << 20;
inline constexpr int64_t kMaxHeadBytes = 16 << 10;
inline constexpr absl::Duration kRequestTimeout = absl::Seconds(10);
inline constexpr absl::Duration kIdleTimeout = absl::Seconds(60);
inline constexpr absl::Duration kWriteTimeout = absl::Seconds(30);
// How long Stop waits for responses in progress to go out.
inline constexpr absl::Duration kStopGrace = absl::Seconds(5);

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string path;                            // without the query
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  // The header's value, or empty.
  std::string Header(const std::string& lowercase_name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// What a streamed response is made of. Every call comes from the
// connection's I/O thread, one at a time.
class StreamSource {
 public:
  virtual ~StreamSource() = default;
  // Bytes to send next (empty: none yet); sets *done once the stream ends
  // with them.
  virtual std::string Pull(bool* done) = 0;
  // The client went away or the connection failed: stop producing.
  virtual void Cancel() = 0;
};

// Asks the connection to pull its source again; callable from any thread,
// any number of times, also after the connection closed.
using Waker = std::function<void()>;

class Reply {
 public:
  virtual ~Reply() = default;
  virtual void Send(HttpResponse response) = 0;
  // Starts a chunked response with `status` and `content_type` whose body
  // the connection pulls from `source` once woken.
  virtual Waker Stream(int status, const std::string& content_type,
                       std::shared_ptr<StreamSource> source) = 0;
  // For an answer that comes later: `cancel` runs (on the I/O thread) if
  // the client disconnects before it is sent.
  virtual void OnHangUp(std::function<void()> cancel) = 0;
};

using Handler = std::function<void(const HttpRequest& request, std::shared_ptr<Reply> reply)>;

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  int port = 0;  // 0: any free port
  int threads = 2;
  std::string tls_cert;  // PEM chain and key: serve HTTPS; empty: plain HTTP
  std::string tls_key;
  std::string tls_client_ca;  // PEM CA certificates: require client certificates they signed
  int tls_reload_seconds = 60;
  // The limits above; tests shorten them.
  absl::Duration request_timeout = kRequestTimeout;
  absl::Duration idle_timeout = kIdleTimeout;
  absl::Duration write_timeout = kWriteTimeout;
  int64_t max_body_bytes = kMaxBodyBytes;
};

class HttpServer {
 public:
  // Routes are matched by method and path: exact paths, or prefixes ending
  // in '/' (the longest wins). Anything else: 404, or 405 for a known path
  // and another method.
  void Route(const std::string& method, const std::string& path, Handler handler);

  // Listens and starts the I/O threads. kUnavailable naming the address
  // when it cannot be bound, kInvalidArgument for TLS files that do not
  // load. Returns the port.
  absl::StatusOr<int> Start(const HttpServerOptions& options);
  // Closes the listener, lets each connection finish the response it is
  // sending (at most kStopGrace), closes every connection and joins the
  // threads.
  void Stop();

  HttpServer();
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attn::serving::http
