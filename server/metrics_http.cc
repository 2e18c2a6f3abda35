#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace attn::serving {
namespace {

void SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the scraper went away
    sent += static_cast<size_t>(n);
  }
}

std::string Response(const std::string& status, const std::string& type, const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

absl::StatusOr<int> MetricsHttpServer::Start(const std::string& host, int port) {
  listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener_ < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1;
  setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--host: \"", host, "\" is not an IPv4 address for the metrics endpoint"));
  }
  if (bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(listener_, 64) != 0) {
    const std::string reason = std::strerror(errno);
    close(listener_);
    listener_ = -1;
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", host, ":", port, ": ",
                                               reason, "; choose another --metrics_port"));
  }
  socklen_t length = sizeof(address);
  getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
  thread_ = std::thread([this] { Serve(); });
  return static_cast<int>(ntohs(address.sin_port));
}

void MetricsHttpServer::Stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  if (listener_ >= 0) close(listener_);
  listener_ = -1;
}

void MetricsHttpServer::Serve() {
  while (!stopping_) {
    pollfd waiting{listener_, POLLIN, 0};
    if (poll(&waiting, 1, /*timeout_ms=*/200) <= 0) continue;  // checks stopping_ now and then
    const int connection = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;
    Answer(connection);
    close(connection);
  }
}

void MetricsHttpServer::Answer(int connection) {
  const timeval write_timeout = absl::ToTimeval(kWriteTimeout);
  setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &write_timeout, sizeof(write_timeout));
  // The request line and headers, whole within the deadline; a scrape
  // sends no body.
  const absl::Time deadline = absl::Now() + kReadDeadline;
  std::string request;
  char buffer[2048];
  while (!absl::StrContains(request, "\r\n\r\n")) {
    if (request.size() > kMaxHead) {
      SendAll(connection, Response("431 Request Header Fields Too Large", "text/plain",
                                   "the request head is over 8 KiB\n"));
      return;
    }
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    pollfd readable{connection, POLLIN, 0};
    if (left_ms <= 0 || poll(&readable, 1, static_cast<int>(left_ms)) <= 0) return;  // too slow
    const ssize_t n = recv(connection, buffer, sizeof(buffer), 0);
    if (n <= 0) return;
    request.append(buffer, static_cast<size_t>(n));
  }
  switch (RouteOf(request.substr(0, request.find("\r\n\r\n")))) {
    case MetricsRoute::kMetrics:
      SendAll(connection,
              Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", render_()));
      break;
    case MetricsRoute::kHealth:
      SendAll(connection, Response("200 OK", "text/plain", "ok\n"));
      break;
    case MetricsRoute::kNotFound:
      SendAll(connection, Response("404 Not Found", "text/plain", "metrics are at /metrics\n"));
      break;
    case MetricsRoute::kMethodNotAllowed:
      SendAll(connection, Response("405 Method Not Allowed", "text/plain", "use GET /metrics\n"));
      break;
    case MetricsRoute::kBadRequest:
      SendAll(connection, Response("400 Bad Request", "text/plain", "not an HTTP request\n"));
      break;
  }
}

MetricsRoute RouteOf(absl::string_view head) {
  // The request line: METHOD SP TARGET SP HTTP/x.y
  const absl::string_view line = head.substr(0, head.find("\r\n"));
  const size_t method_end = line.find(' ');
  const size_t target_end = method_end == absl::string_view::npos ? absl::string_view::npos
                                                                  : line.find(' ', method_end + 1);
  if (target_end == absl::string_view::npos ||
      !absl::StartsWith(line.substr(target_end + 1), "HTTP/")) {
    return MetricsRoute::kBadRequest;
  }
  if (line.substr(0, method_end) != "GET") return MetricsRoute::kMethodNotAllowed;
  absl::string_view target = line.substr(method_end + 1, target_end - method_end - 1);
  target = target.substr(0, target.find('?'));
  if (target == "/metrics") return MetricsRoute::kMetrics;
  if (target == "/healthz") return MetricsRoute::kHealth;
  return MetricsRoute::kNotFound;
}

}  // namespace attn::serving
