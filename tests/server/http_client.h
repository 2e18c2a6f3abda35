// A plain blocking HTTP/1.1 client on raw sockets for the HTTP tests: it
// sends exactly the bytes a test gives (so tests can also send broken,
// partial or slow requests) and decodes what comes back.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace attn::serving::testing {

// A connected socket to 127.0.0.1:port, or -1.
inline int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline bool SendAll(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Everything the peer sends until it closes.
inline std::string ReadToClose(int fd) {
  std::string reply;
  char buffer[8192];
  for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) reply.append(buffer, n);
  return reply;
}

// Sends `request` on a new connection and returns the raw answer.
inline std::string Exchange(int port, const std::string& request) {
  const int fd = Connect(port);
  if (fd < 0) return "";
  SendAll(fd, request);
  std::string reply = ReadToClose(fd);
  close(fd);
  return reply;
}

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;                            // de-chunked
};

// Parses a raw answer (status line, headers, a body by length or chunks).
inline HttpReply ParseReply(const std::string& raw) {
  HttpReply reply;
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) return reply;
  std::vector<std::string> lines = absl::StrSplit(raw.substr(0, head_end), "\r\n");
  std::vector<std::string> status = absl::StrSplit(lines[0], ' ');
  if (status.size() < 2 || !absl::SimpleAtoi(status[1], &reply.status)) return reply;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    reply.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  std::string rest = raw.substr(head_end + 4);
  if (reply.headers["transfer-encoding"] != "chunked") {
    reply.body = rest;
    return reply;
  }
  size_t at = 0;
  while (at < rest.size()) {
    const size_t line_end = rest.find("\r\n", at);
    if (line_end == std::string::npos) break;
    size_t size = 0;
    if (!absl::SimpleHexAtoi(rest.substr(at, line_end - at), &size) || size == 0) break;
    reply.body += rest.substr(line_end + 2, size);
    at = line_end + 2 + size + 2;
  }
  return reply;
}

// One request on its own connection ("Connection: close").
inline HttpReply Request(int port, const std::string& method, const std::string& path,
                         const std::string& body = "", const std::string& extra_headers = "") {
  return ParseReply(Exchange(
      port, absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n",
                         "Content-Type: application/json\r\nContent-Length: ", body.size(), "\r\n",
                         extra_headers, "\r\n", body)));
}

}  // namespace attn::serving::testing
