#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

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

std::string Response(const std::string& status, const std::string& type,
                     const std::string& body) {
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
  // The request line and headers; a scrape sends no body.
  std::string request;
  char buffer[2048];
  while (request.size() < 16384 && !absl::StrContains(request, "\r\n\r\n")) {
    pollfd readable{connection, POLLIN, 0};
    if (poll(&readable, 1, /*timeout_ms=*/2000) <= 0) return;
    const ssize_t n = recv(connection, buffer, sizeof(buffer), 0);
    if (n <= 0) return;
    request.append(buffer, static_cast<size_t>(n));
  }
  if (absl::StartsWith(request, "GET /metrics ") || absl::StartsWith(request, "GET /metrics?")) {
    SendAll(connection, Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", render_()));
  } else if (absl::StartsWith(request, "GET ")) {
    SendAll(connection, Response("404 Not Found", "text/plain", "metrics are at /metrics\n"));
  } else {
    SendAll(connection, Response("405 Method Not Allowed", "text/plain", "use GET /metrics\n"));
  }
}

}  // namespace attn::serving
