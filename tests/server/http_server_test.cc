// The HTTP server alone (server/http/http_server.h): routes, the limits on
// heads, bodies and slow clients, streamed answers pulled as the source
// wakes the connection, and hang-ups, over real sockets on 127.0.0.1.
#include "server/http/http_server.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "tests/server/http_client.h"

namespace attn::serving::http {
namespace {

using testing::Connect;
using testing::Exchange;
using testing::ParseReply;
using testing::ReadToClose;
using testing::Request;
using testing::SendAll;

// Chunks the test hands over one at a time.
class QueueSource : public StreamSource {
 public:
  void Add(const std::string& chunk, bool last = false) {
    std::lock_guard<std::mutex> lock(mu_);
    chunks_.push_back(chunk);
    end_ = end_ || last;
  }
  std::string Pull(bool* done) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++pulls_;
    std::string out;
    while (!chunks_.empty()) {
      out += chunks_.front();
      chunks_.pop_front();
    }
    *done = end_;
    return out;
  }
  void Cancel() override {
    if (!cancelled_.HasBeenNotified()) cancelled_.Notify();
  }
  bool cancelled() const { return cancelled_.HasBeenNotified(); }
  bool AwaitCancelled(absl::Duration limit) const {
    return cancelled_.WaitForNotificationWithTimeout(limit);
  }

 private:
  std::mutex mu_;
  std::deque<std::string> chunks_;
  bool end_ = false;
  int pulls_ = 0;
  absl::Notification cancelled_;
};

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpServerOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    server_.Route("GET", "/hello", [](const HttpRequest& request, std::shared_ptr<Reply> reply) {
      HttpResponse response;
      response.content_type = "text/plain";
      response.body = absl::StrCat("hello ", request.Header("x-name"));
      reply->Send(std::move(response));
    });
    server_.Route("POST", "/echo", [](const HttpRequest& request, std::shared_ptr<Reply> reply) {
      HttpResponse response;
      response.body = request.body;
      reply->Send(std::move(response));
    });
    server_.Route("GET", "/items/", [](const HttpRequest& request, std::shared_ptr<Reply> reply) {
      HttpResponse response;
      response.body = request.path;
      reply->Send(std::move(response));
    });
    server_.Route("GET", "/stream", [this](const HttpRequest&, std::shared_ptr<Reply> reply) {
      absl::MutexLock lock(&mu_);
      waker_ = reply->Stream(200, "text/event-stream", source_);
    });
    server_.Route("GET", "/later", [this](const HttpRequest&, std::shared_ptr<Reply> reply) {
      reply->OnHangUp([this] {
        absl::MutexLock lock(&mu_);
        hung_up_ = true;
      });
      absl::MutexLock lock(&mu_);
      later_ = reply;
    });
    auto port = server_.Start(options);
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
  }
  void Wake() {
    absl::MutexLock lock(&mu_);
    if (waker_) waker_();
  }
  // Waits up to `limit` until `done` holds of the fields mu_ guards; the
  // handlers' writes under mu_ make it look again.
  bool Await(const std::function<bool()>& done, absl::Duration limit = absl::Seconds(5)) {
    absl::MutexLock lock(&mu_);
    auto holds = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return done(); };
    return mu_.AwaitWithTimeout(absl::Condition(&holds), limit);
  }
  bool hung_up() {
    absl::MutexLock lock(&mu_);
    return hung_up_;
  }

  HttpServer server_;
  int port_ = 0;
  absl::Mutex mu_;
  std::shared_ptr<QueueSource> source_ = std::make_shared<QueueSource>();
  Waker waker_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Reply> later_ ABSL_GUARDED_BY(mu_);
  bool hung_up_ ABSL_GUARDED_BY(mu_) = false;
};

TEST_F(HttpServerTest, RoutesByPathAndMethod) {
  Start();
  testing::HttpReply hello = Request(port_, "GET", "/hello", "", "X-Name: you\r\n");
  EXPECT_EQ(hello.status, 200);
  EXPECT_EQ(hello.body, "hello you");
  EXPECT_EQ(Request(port_, "GET", "/hello?x=1").status, 200);  // the query is not the path
  EXPECT_EQ(Request(port_, "POST", "/echo", "{\"a\": 1}").body, "{\"a\": 1}");
  EXPECT_EQ(Request(port_, "GET", "/items/42").body, "/items/42");
  testing::HttpReply missing = Request(port_, "GET", "/nothing");
  EXPECT_EQ(missing.status, 404);
  EXPECT_TRUE(absl::StrContains(missing.body, "/nothing"));
  EXPECT_EQ(Request(port_, "DELETE", "/hello").status, 405);
  EXPECT_EQ(Request(port_, "GET", "/echo").status, 405);
}

TEST_F(HttpServerTest, KeepAliveServesRequestsInTurn) {
  Start();
  const int fd = Connect(port_);
  ASSERT_GE(fd, 0);
  const std::string request = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_TRUE(SendAll(fd, request + request + "GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n"));
  const std::string replies = ReadToClose(fd);
  close(fd);
  size_t count = 0;
  for (size_t at = 0; (at = replies.find("HTTP/1.1 200", at)) != std::string::npos; ++at) ++count;
  EXPECT_EQ(count, 3u) << replies;
}

TEST_F(HttpServerTest, LimitsAnswerWithTheirStatus) {
  HttpServerOptions options;
  options.max_body_bytes = 1 << 20;
  Start(options);
  // A 10 MB body is refused from its Content-Length, before it is sent.
  const std::string big =
      Exchange(port_, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10485760\r\n\r\n" +
                          std::string(65536, 'x'));
  EXPECT_TRUE(absl::StartsWith(big, "HTTP/1.1 413")) << big.substr(0, 200);
  const std::string head = Exchange(
      port_, "GET /hello HTTP/1.1\r\nX: " + std::string(kMaxHeadBytes + 10, 'a') + "\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(head, "HTTP/1.1 431")) << head.substr(0, 200);
  const std::string garbage = Exchange(port_, "\x01\x02 nonsense\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(garbage, "HTTP/1.1 400")) << garbage.substr(0, 200);
  EXPECT_EQ(Request(port_, "GET", "/hello").status, 200);
}

TEST_F(HttpServerTest, AClientTooSlowToSendItsHeadIsDropped) {
  HttpServerOptions options;
  options.request_timeout = absl::Seconds(1);
  Start(options);
  // A byte every 100 ms never completes the head within the second.
  const int slow = Connect(port_);
  const std::string head = "GET /hello HTTP/1.1\r\nX-Name: slow\r\n";
  const absl::Time start = absl::Now();
  bool dropped = false;
  for (size_t i = 0; i < head.size() && !dropped; ++i) {
    dropped = send(slow, head.data() + i, 1, MSG_NOSIGNAL) < 0;
    // Paced by the server: each byte waits up to 100 ms for the server to
    // close the connection, which ends the loop at once when it does.
    pollfd closed{slow, POLLIN, 0};
    char byte;
    dropped = dropped || (poll(&closed, 1, 100) > 0 && recv(slow, &byte, 1, MSG_DONTWAIT) == 0);
  }
  EXPECT_TRUE(dropped);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  close(slow);
  EXPECT_EQ(Request(port_, "GET", "/hello").status, 200);
}

TEST_F(HttpServerTest, AStreamIsPulledWhenWokenAndEndsWithItsSource) {
  Start();
  const int fd = Connect(port_);
  ASSERT_TRUE(SendAll(fd, "GET /stream HTTP/1.1\r\nConnection: close\r\n\r\n"));
  ASSERT_TRUE(Await([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return static_cast<bool>(waker_); }));
  source_->Add("data: one\n\n");
  Wake();
  source_->Add("data: two\n\n", /*last=*/true);
  Wake();
  const testing::HttpReply reply = ParseReply(ReadToClose(fd));
  close(fd);
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.headers.at("content-type"), "text/event-stream");
  EXPECT_EQ(reply.headers.at("transfer-encoding"), "chunked");
  EXPECT_EQ(reply.body, "data: one\n\ndata: two\n\n");
  EXPECT_FALSE(source_->cancelled());
}

TEST_F(HttpServerTest, AClientThatLeavesAStreamCancelsItsSource) {
  Start();
  const int fd = Connect(port_);
  ASSERT_TRUE(SendAll(fd, "GET /stream HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(Await([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return static_cast<bool>(waker_); }));
  source_->Add("data: one\n\n");
  Wake();
  char buffer[256];
  ASSERT_GT(recv(fd, buffer, sizeof(buffer), 0), 0);
  const absl::Time left = absl::Now();
  close(fd);
  ASSERT_TRUE(source_->AwaitCancelled(absl::Seconds(1)));
  EXPECT_LT(absl::Now() - left, absl::Seconds(1));
  Wake();  // a waker outliving its connection does nothing
}

TEST_F(HttpServerTest, AClientThatLeavesBeforeTheAnswerIsHeard) {
  Start();
  const int fd = Connect(port_);
  ASSERT_TRUE(SendAll(fd, "GET /later HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(Await([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return later_ != nullptr; }));
  // The watch is set on the I/O thread after the handler returns; a client
  // gone before that is noticed all the same.
  close(fd);
  EXPECT_TRUE(Await([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return hung_up_; }, absl::Seconds(1)));
  absl::MutexLock lock(&mu_);
  later_->Send(HttpResponse());  // an answer to a closed connection goes nowhere
}

TEST_F(HttpServerTest, AnAnswerThatComesLaterArrives) {
  Start();
  std::thread answer([this] {
    ASSERT_TRUE(Await([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return later_ != nullptr; }));
    HttpResponse response;
    response.body = "{\"late\": true}";
    absl::MutexLock lock(&mu_);
    later_->Send(response);
  });
  const testing::HttpReply reply = Request(port_, "GET", "/later");
  answer.join();
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, "{\"late\": true}");
  EXPECT_FALSE(hung_up());
}

// Answers that come a little later, on fresh connections, many at once:
// every one arrives, and no client is taken to have hung up (the hang-up
// watch's wake-ups without an end are waited out).
TEST_F(HttpServerTest, ManyLaterAnswersOnFreshConnectionsAllArrive) {
  std::deque<std::shared_ptr<Reply>> waiting;
  std::atomic<int> hang_ups{0};
  bool stop = false;
  server_.Route("POST", "/soon", [&](const HttpRequest&, std::shared_ptr<Reply> reply) {
    reply->OnHangUp([&] { ++hang_ups; });
    absl::MutexLock lock(&mu_);
    waiting.push_back(std::move(reply));
  });
  Start();
  std::thread answers([&] {
    for (;;) {
      std::shared_ptr<Reply> reply;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop || !waiting.empty(); };
        mu_.Await(absl::Condition(&ready));
        if (waiting.empty()) return;
        reply = std::move(waiting.front());
        waiting.pop_front();
      }
      absl::SleepFor(absl::Microseconds(200));
      HttpResponse response;
      response.body = "ok";
      reply->Send(std::move(response));
    }
  });
  std::atomic<int> answered{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 16; ++c) {
    clients.emplace_back([&] {
      for (int i = 0; i < 40; ++i) {
        const testing::HttpReply reply = Request(port_, "POST", "/soon", R"({"n": 1})");
        if (reply.status == 200 && reply.body == "ok") ++answered;
      }
    });
  }
  for (auto& t : clients) t.join();
  {
    absl::MutexLock lock(&mu_);
    stop = true;
  }
  answers.join();
  EXPECT_EQ(answered.load(), 16 * 40);
  EXPECT_EQ(hang_ups.load(), 0);
}

TEST(HttpServerStartTest, ATakenPortOrABadAddressIsAnError) {
  HttpServer first;
  HttpServerOptions options;
  options.host = "127.0.0.1";
  auto port = first.Start(options);
  ASSERT_TRUE(port.ok());
  HttpServer second;
  options.port = *port;
  auto taken = second.Start(options);
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(taken.status().message(), absl::StrCat(*port)));
  HttpServer third;
  options.host = "not-an-address";
  EXPECT_EQ(third.Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  HttpServer fourth;
  options.host = "127.0.0.1";
  options.port = 0;
  options.tls_cert = "/nonexistent.pem";
  options.tls_key = "/nonexistent.key";
  auto tls = fourth.Start(options);
  ASSERT_FALSE(tls.ok());
  EXPECT_TRUE(absl::StrContains(tls.status().message(), "--tls_cert")) << tls.status();
}

}  // namespace
}  // namespace attn::serving::http
