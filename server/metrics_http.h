// A minimal HTTP/1.1 endpoint for Prometheus scrapes: GET /metrics answers
// with the text exposition from `render`, GET /healthz with "ok"; other
// paths get 404, other methods 405. One thread, one request per
// connection, one connection at a time (Prometheus opens few), so that no
// client can make it hold more than one: a request head must arrive whole
// within kReadDeadline (a client that sends a byte a second is dropped) and
// within kMaxHead bytes (431 otherwise), and a reply that the client does
// not read within kWriteTimeout is abandoned.
//
// prometheus-cpp's own exposer (civetweb) cannot start its threads in a
// process that links Debian's libtorch_cpu ("Cannot create threads"), so the
// server serves the exposition itself.
#pragma once
#include <atomic>
#include <cstddef>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace attn::serving {

inline constexpr size_t kMaxHead = 8192;
inline constexpr absl::Duration kReadDeadline = absl::Seconds(2);
inline constexpr absl::Duration kWriteTimeout = absl::Seconds(5);

// What a request head (everything before the blank line) asks for.
enum class MetricsRoute { kMetrics, kHealth, kNotFound, kMethodNotAllowed, kBadRequest };
MetricsRoute RouteOf(absl::string_view head);

class MetricsHttpServer {
 public:
  explicit MetricsHttpServer(std::function<std::string()> render) : render_(std::move(render)) {}
  ~MetricsHttpServer();  // Stop()s

  // Listens on host:port (port 0: any free one) and returns the bound port.
  absl::StatusOr<int> Start(const std::string& host, int port);
  void Stop();

 private:
  void Serve();
  void Answer(int connection);

  std::function<std::string()> render_;
  int listener_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace attn::serving
