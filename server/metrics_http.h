// A minimal HTTP/1.1 endpoint for Prometheus scrapes: GET /metrics answers
// with the text exposition from `render`; anything else gets 404. One
// thread, one request per connection (Prometheus opens few connections).
//
// prometheus-cpp's own exposer (civetweb) cannot start its threads in a
// process that links Debian's libtorch_cpu ("Cannot create threads"), so the
// server serves the exposition itself.
#pragma once
#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace attn::serving {

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
