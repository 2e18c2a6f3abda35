#include "server/http/http_server.h"

#include <pthread.h>
#include <sys/socket.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <list>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace attn::serving::http {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = boost::asio::ip::tcp;

std::chrono::milliseconds Chrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

HttpResponse Plain(int status, const std::string& text) {
  HttpResponse response;
  response.status = status;
  response.content_type = "text/plain; charset=utf-8";
  response.body = text + "\n";
  return response;
}

// The routes: exact paths and '/'-ended prefixes, by method.
class Routes {
 public:
  void Add(const std::string& method, const std::string& path, Handler handler) {
    table_[path][method] = std::move(handler);
  }
  // The handler of a request, or a response that refuses it.
  const Handler* Find(const std::string& method, const std::string& path,
                      HttpResponse* refusal) const {
    const std::map<std::string, Handler>* methods = nullptr;
    size_t longest = 0;
    for (const auto& [route, by_method] : table_) {
      const bool exact = route == path;
      const bool prefix = route.back() == '/' && path.compare(0, route.size(), route) == 0;
      if ((exact || prefix) && (exact ? path.size() + 1 : route.size()) > longest) {
        longest = exact ? path.size() + 1 : route.size();
        methods = &by_method;
      }
    }
    if (methods == nullptr) {
      *refusal = Plain(404, absl::StrCat("no such path: ", path));
      return nullptr;
    }
    auto it = methods->find(method);
    if (it == methods->end()) {
      *refusal = Plain(405, absl::StrCat(method, " is not allowed on ", path));
      return nullptr;
    }
    return &it->second;
  }

 private:
  std::map<std::string, std::map<std::string, Handler>> table_;
};

// What the server asks of every connection when it stops.
class Connection {
 public:
  virtual ~Connection() = default;
  // From any thread: closes the connection once the response in progress
  // (if any) has gone out; an idle one closes at once.
  virtual void Drain() = 0;
};

// One connection, plain (beast::tcp_stream) or TLS (ssl_stream over one).
// Every member is touched on the connection's strand only.
template <typename Socket>
class Session : public Connection, public std::enable_shared_from_this<Session<Socket>> {
 public:
  // `tls`: the context a TLS stream uses, kept alive with it (null: plain).
  Session(Socket stream, const Routes& routes, const HttpServerOptions& options,
          std::shared_ptr<ssl::context> tls)
      : tls_(std::move(tls)), stream_(std::move(stream)), routes_(routes), options_(options) {}
  ~Session() {
    if (source_ && !stream_done_) source_->Cancel();
    if (hang_up_) hang_up_();
  }

  void Begin() {
    if constexpr (std::is_same_v<Socket, beast::ssl_stream<beast::tcp_stream>>) {
      Lowest().expires_after(Chrono(options_.request_timeout));
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (!ec) self->ReadRequest();
                              });
    } else {
      ReadRequest();
    }
  }

  // From the Reply: on the strand.
  void Send(HttpResponse response) {
    if (answered_) return;
    answered_ = true;
    hang_up_ = nullptr;
    auto message = std::make_shared<bhttp::response<bhttp::string_body>>();
    message->result(static_cast<unsigned>(response.status));
    message->version(11);
    message->set(bhttp::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) message->set(name, value);
    message->keep_alive(keep_alive_);
    message->body() = std::move(response.body);
    message->prepare_payload();
    Lowest().expires_after(Chrono(options_.write_timeout));
    bhttp::async_write(stream_, *message,
                       [self = this->shared_from_this(), message](beast::error_code ec, size_t) {
                         self->AfterResponse(ec);
                       });
  }

  void StartStream(int status, const std::string& content_type,
                   std::shared_ptr<StreamSource> source) {
    if (answered_) {
      source->Cancel();
      return;
    }
    answered_ = true;
    hang_up_ = nullptr;
    source_ = std::move(source);
    stream_done_ = false;
    header_ = std::make_shared<bhttp::response<bhttp::empty_body>>();
    header_->result(static_cast<unsigned>(status));
    header_->version(11);
    header_->set(bhttp::field::content_type, content_type);
    header_->set(bhttp::field::cache_control, "no-cache");
    header_->keep_alive(keep_alive_);
    header_->chunked(true);
    serializer_ = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*header_);
    writing_ = true;
    Lowest().expires_after(Chrono(options_.write_timeout));
    bhttp::async_write_header(stream_, *serializer_,
                              [self = this->shared_from_this()](beast::error_code ec, size_t) {
                                self->writing_ = false;
                                if (ec) return self->Fail();
                                self->WatchForHangUp();
                                self->Pull();
                              });
  }

  void Pull() {
    if (!source_ || writing_ || stream_done_ || closed_) return;
    bool done = false;
    chunk_ = source_->Pull(&done);
    stream_done_ = done;
    if (chunk_.empty()) {
      if (done) EndStream();
      return;  // else the source wakes us again
    }
    writing_ = true;
    Lowest().expires_after(Chrono(options_.write_timeout));
    net::async_write(stream_, bhttp::make_chunk(net::buffer(chunk_)),
                     [self = this->shared_from_this()](beast::error_code ec, size_t) {
                       self->writing_ = false;
                       if (ec) return self->Fail();
                       if (self->stream_done_) return self->EndStream();
                       self->Pull();
                     });
  }

  // From the Reply: on the strand.
  void SetHangUp(std::function<void()> cancel) {
    if (answered_ || closed_) return;
    hang_up_ = std::move(cancel);
    WatchForHangUp();
  }

  net::any_io_executor executor() { return stream_.get_executor(); }

  void Drain() override {
    net::post(executor(), [self = this->shared_from_this()] {
      self->keep_alive_ = false;
      if (!self->busy_) self->Close();
    });
  }

 private:
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  void ReadRequest() {
    parser_.emplace();
    parser_->body_limit(static_cast<uint64_t>(options_.max_body_bytes));
    parser_->header_limit(static_cast<uint32_t>(kMaxHeadBytes));
    answered_ = false;
    Lowest().expires_after(
        Chrono(requests_ == 0 ? options_.request_timeout : options_.idle_timeout));
    bhttp::async_read(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (ec == bhttp::error::body_limit) {
      keep_alive_ = false;
      return Send(
          Plain(413, absl::StrCat("the body is larger than ", options_.max_body_bytes, " bytes")));
    }
    if (ec == bhttp::error::header_limit) {
      keep_alive_ = false;
      return Send(
          Plain(431, absl::StrCat("the request head is larger than ", kMaxHeadBytes, " bytes")));
    }
    if (ec) {
      // A malformed request gets 400; a closed, timed-out or cut-off one
      // only its connection closed.
      const bool malformed =
          ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category() &&
          ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
      if (!malformed) return Close();
      keep_alive_ = false;
      return Send(Plain(400, absl::StrCat("malformed HTTP request: ", ec.message())));
    }
    ++requests_;
    ++generation_;
    busy_ = true;
    const auto& message = parser_->get();
    HttpRequest request;
    request.method = std::string(message.method_string());
    const std::string target(message.target());
    request.path = target.substr(0, target.find('?'));
    for (const auto& field : message) {
      request.headers[absl::AsciiStrToLower(std::string(field.name_string()))] =
          std::string(field.value());
    }
    request.body = message.body();
    keep_alive_ = message.keep_alive();
    HttpResponse refusal;
    const Handler* handler = routes_.Find(request.method, request.path, &refusal);
    if (handler == nullptr) return Send(std::move(refusal));
    try {
      (*handler)(request, MakeReply());
    } catch (const std::exception& error) {
      // A handler's bug costs its request, never the server.
      keep_alive_ = false;
      Send(Plain(500, absl::StrCat("internal error: ", error.what())));
    }
  }

  std::shared_ptr<Reply> MakeReply();

  void AfterResponse(beast::error_code ec) {
    busy_ = false;
    if (ec || !keep_alive_) return Close();
    ReadRequest();
  }

  void EndStream() {
    writing_ = true;
    Lowest().expires_after(Chrono(options_.write_timeout));
    net::async_write(stream_, bhttp::make_chunk_last(),
                     [self = this->shared_from_this()](beast::error_code ec, size_t) {
                       self->writing_ = false;
                       self->source_.reset();
                       self->AfterResponse(ec);
                     });
  }

  // While a request waits for its answer or streams it, the client sends
  // nothing; the socket reaching its end (or failing) is its hang-up. Bytes
  // to read are a pipelined request: the watch ends. A wake-up with neither
  // (the reactor may report a socket ready that the last read emptied) is
  // waited out again, never taken for a hang-up.
  void WatchForHangUp() {
    Lowest().socket().async_wait(
        tcp::socket::wait_read,
        [self = this->shared_from_this(), generation = generation_](beast::error_code ec) {
          if (generation != self->generation_ || self->closed_) return;
          if (!ec) {
            char byte;
            const ssize_t n =
                ::recv(self->Lowest().socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
            if (n > 0) return;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
              return self->WatchForHangUp();
            }
          }
          if (self->source_ && !self->stream_done_) return self->Fail();
          if (self->hang_up_) {
            std::function<void()> cancel = std::move(self->hang_up_);
            self->hang_up_ = nullptr;
            cancel();
            self->Close();
          }
        });
  }

  void Fail() {
    if (source_ && !stream_done_) source_->Cancel();
    source_.reset();
    Close();
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Lowest().close();
  }

  std::shared_ptr<ssl::context> tls_;  // declared first: the stream refers to it
  Socket stream_;
  const Routes& routes_;
  const HttpServerOptions& options_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  int64_t requests_ = 0;
  bool keep_alive_ = true;
  bool answered_ = false;
  bool busy_ = false;  // from a request read to its response written
  bool closed_ = false;
  std::shared_ptr<StreamSource> source_;
  std::shared_ptr<bhttp::response<bhttp::empty_body>> header_;
  std::shared_ptr<bhttp::response_serializer<bhttp::empty_body>> serializer_;
  std::string chunk_;  // the chunk being written
  bool writing_ = false;
  bool stream_done_ = false;
  int64_t generation_ = 0;         // requests read: a hang-up watch belongs to one
  std::function<void()> hang_up_;  // Reply::OnHangUp's, until the answer goes out
};

// Hands a handler's answer to its connection's strand; a connection that
// is gone takes nothing.
template <typename Socket>
class SessionReply : public Reply {
 public:
  explicit SessionReply(std::shared_ptr<Session<Socket>> session)
      : session_(session), executor_(session->executor()) {}
  void Send(HttpResponse response) override {
    net::dispatch(executor_, [weak = session_, response = std::move(response)]() mutable {
      if (auto s = weak.lock()) s->Send(std::move(response));
    });
  }
  Waker Stream(int status, const std::string& content_type,
               std::shared_ptr<StreamSource> source) override {
    net::dispatch(executor_, [weak = session_, status, content_type, source]() {
      if (auto s = weak.lock()) {
        s->StartStream(status, content_type, source);
      } else {
        source->Cancel();
      }
    });
    return [weak = session_, executor = executor_]() {
      net::post(executor, [weak] {
        if (auto s = weak.lock()) s->Pull();
      });
    };
  }
  void OnHangUp(std::function<void()> cancel) override {
    net::dispatch(executor_, [weak = session_, cancel = std::move(cancel)]() mutable {
      if (auto s = weak.lock()) s->SetHangUp(std::move(cancel));
    });
  }

 private:
  std::weak_ptr<Session<Socket>> session_;
  net::any_io_executor executor_;
};

template <typename Socket>
std::shared_ptr<Reply> Session<Socket>::MakeReply() {
  return std::make_shared<SessionReply<Socket>>(this->shared_from_this());
}

}  // namespace

std::string HttpRequest::Header(const std::string& lowercase_name) const {
  auto it = headers.find(lowercase_name);
  return it == headers.end() ? std::string() : it->second;
}

class HttpServer::Impl {
 public:
  Routes routes;

  absl::StatusOr<int> Start(const HttpServerOptions& options) {
    options_ = options;
    if (!options.tls_cert.empty() || !options.tls_key.empty()) {
      if (absl::Status loaded = LoadTls(); !loaded.ok()) return loaded;
    }
    beast::error_code ec;
    const auto address = net::ip::make_address(options.host, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat(options.host, " is not an address"));
    acceptor_.open(address.is_v6() ? tcp::v6() : tcp::v4(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(tcp::endpoint(address, static_cast<uint16_t>(options.port)), ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", options.host, ":", options.port, ": ", ec.message()));
    }
    const int port = acceptor_.local_endpoint().port();
    Accept();
    if (tls_) ScheduleReload();
    for (int i = 0; i < std::max(1, options.threads); ++i) {
      threads_.emplace_back([this] {
        pthread_setname_np(pthread_self(), "attn-http");
        io_.run();
      });
    }
    return port;
  }

  // Stops accepting, lets each connection finish the response it is
  // sending (a stream ends once its source does), closes the rest, and
  // joins the threads; whatever is still open after kStopGrace is dropped.
  void Stop() {
    if (stopped_) return;
    stopped_ = true;
    net::post(io_, [this] {
      beast::error_code ignored;
      acceptor_.close(ignored);
      reload_.cancel();
    });
    {
      std::lock_guard<std::mutex> lock(connections_mu_);
      for (const std::weak_ptr<Connection>& weak : connections_) {
        if (auto connection = weak.lock()) connection->Drain();
      }
      connections_.clear();
    }
    std::mutex mu;
    std::condition_variable joined;
    bool done = false;
    std::thread watchdog([&] {
      std::unique_lock<std::mutex> lock(mu);
      if (!joined.wait_for(lock, Chrono(kStopGrace), [&] { return done; })) io_.stop();
    });
    for (auto& t : threads_) t.join();
    threads_.clear();
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    joined.notify_one();
    watchdog.join();
  }

 private:
  absl::Status LoadTls() {
    auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
    beast::error_code ec;
    context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                         ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                         ssl::context::no_tlsv1_1);
    context->use_certificate_chain_file(options_.tls_cert, ec);
    if (!ec) context->use_private_key_file(options_.tls_key, ssl::context::pem, ec);
    if (!ec && !options_.tls_client_ca.empty()) {
      context->load_verify_file(options_.tls_client_ca, ec);
      context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
    }
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat("--tls_cert/--tls_key (", options_.tls_cert,
                                                     ", ", options_.tls_key, "): ", ec.message()));
    }
    std::lock_guard<std::mutex> lock(tls_mu_);
    tls_ = std::move(context);
    return absl::OkStatus();
  }

  void ScheduleReload() {
    reload_.expires_after(std::chrono::seconds(std::max(1, options_.tls_reload_seconds)));
    reload_.async_wait([this](beast::error_code ec) {
      if (ec) return;
      LoadTls().IgnoreError();  // a bad renewal keeps the certificate that works
      ScheduleReload();
    });
  }

  void Accept() {
    acceptor_.async_accept(net::make_strand(io_), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
      if (!ec) Serve(std::move(socket));
      Accept();
    });
  }

  void Serve(tcp::socket socket) {
    // Streamed events are small writes: without this, Nagle's algorithm
    // holds each behind the client's delayed ACK (up to 40 ms on Linux),
    // which is what a first token's latency would show.
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    std::shared_ptr<ssl::context> tls;
    {
      std::lock_guard<std::mutex> lock(tls_mu_);
      tls = tls_;
    }
    if (tls) {
      // The session keeps its context alive; a reload swaps in a new one
      // for later connections only.
      beast::ssl_stream<beast::tcp_stream> stream(beast::tcp_stream(std::move(socket)), *tls);
      auto session = std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
          std::move(stream), routes, options_, tls);
      Track(session);
      session->Begin();
    } else {
      auto session = std::make_shared<Session<beast::tcp_stream>>(
          beast::tcp_stream(std::move(socket)), routes, options_, nullptr);
      Track(session);
      session->Begin();
    }
  }

  // Remembers a connection for Stop, forgetting those that closed now and
  // then so that the list stays as long as the open connections.
  void Track(const std::shared_ptr<Connection>& connection) {
    std::lock_guard<std::mutex> lock(connections_mu_);
    if (connections_.size() >= 2 * tracked_after_sweep_ + 64) {
      connections_.remove_if([](const std::weak_ptr<Connection>& c) { return c.expired(); });
      tracked_after_sweep_ = connections_.size();
    }
    connections_.push_back(connection);
  }

  HttpServerOptions options_;
  net::io_context io_;
  tcp::acceptor acceptor_{io_};
  net::steady_timer reload_{io_};
  std::mutex tls_mu_;
  std::shared_ptr<ssl::context> tls_;
  std::vector<std::thread> threads_;
  bool stopped_ = false;
  std::mutex connections_mu_;
  std::list<std::weak_ptr<Connection>> connections_;
  size_t tracked_after_sweep_ = 0;
};

HttpServer::HttpServer() : impl_(std::make_unique<Impl>()) {}
HttpServer::~HttpServer() { Stop(); }

void HttpServer::Route(const std::string& method, const std::string& path, Handler handler) {
  impl_->routes.Add(method, path, std::move(handler));
}

absl::StatusOr<int> HttpServer::Start(const HttpServerOptions& options) {
  return impl_->Start(options);
}

void HttpServer::Stop() { impl_->Stop(); }

}  // namespace attn::serving::http
