#include "server/http_connection.h"

#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <condition_variable>
#include <mutex>

#include <boost/beast/core/string.hpp>
#include <fmt/format.h>

namespace kestrel::server::detail {
namespace {

std::string head_text(int status, const std::string& content_type, const HttpHeaders& headers,
                      std::optional<size_t> content_length, bool chunked, bool keep_alive) {
  const auto reason = http::obsolete_reason(http::status(unsigned(status)));
  std::string text = fmt::format("HTTP/1.1 {} {}\r\n", status, std::string_view(reason.data(), reason.size()));
  if (!content_type.empty()) text += "Content-Type: " + content_type + "\r\n";
  if (content_length) text += fmt::format("Content-Length: {}\r\n", *content_length);
  if (chunked) text += "Transfer-Encoding: chunked\r\n";
  text += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const auto& [name, value] : headers) text += name + ": " + value + "\r\n";
  return text + "\r\n";
}

std::string response_text(const HttpResponse& r, bool keep_alive) {
  return head_text(r.status, r.content_type, r.headers, r.body.size(), false, keep_alive) + r.body;
}

bool is_disconnect(beast::error_code ec) {
  return ec == http::error::end_of_stream || ec == http::error::partial_message || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::operation_aborted ||
         ec == asio::error::bad_descriptor || ec == asio::error::broken_pipe || ec == beast::error::timeout;
}

}  // namespace

// The ResponseStream of one blocking request. Its methods run on the handler's thread: each write
// is posted to the connection's strand and waited for, so the handler is paced by the client
// (a stalled client makes the write miss its deadline, the handler sees false and stops).
class Exchange : public ResponseStream, public std::enable_shared_from_this<Exchange> {
 public:
  explicit Exchange(std::shared_ptr<Connection> connection) : connection_(std::move(connection)) {}

  bool send(const HttpResponse& response) override {
    if (started_) return false;
    started_ = true;
    ended_ = true;
    keep_alive_ = connection_->keep_alive();
    return write(response_text(response, keep_alive_));
  }

  bool begin_chunked(int status, const std::string& content_type, const HttpHeaders& headers) override {
    if (started_) return false;
    started_ = true;
    // HTTP/1.0 has no chunked encoding: the body runs until the connection closes.
    chunked_ = connection_->version_ >= 11;
    keep_alive_ = chunked_ && connection_->keep_alive();
    return write(head_text(status, content_type, headers, std::nullopt, chunked_, keep_alive_));
  }

  bool write_chunk(std::string_view data) override {
    if (!started_ || ended_) return false;
    if (data.empty()) return !failed_;
    return write(chunked_ ? fmt::format("{:x}\r\n{}\r\n", data.size(), data) : std::string(data));
  }

  bool end_chunked() override {
    if (!started_ || ended_) return false;
    ended_ = true;
    return chunked_ ? write("0\r\n\r\n") : !failed_;
  }

  bool client_gone() const override { return gone_.load() || failed_; }
  bool aborting() const override { return connection_->host_.aborting(); }

  void mark_gone() { gone_.store(true); }

  // The handler returned: answer for it if it did not, then read the next request or close.
  void finish(const std::string& failure) {
    if (!started_) {
      const std::string message = failure.empty() ? "the handler gave no response" : failure;
      send(connection_->host_.router().error(500, message));
    }
    const bool reuse = ended_ && !failed_ && keep_alive_;
    asio::post(connection_->stream_.get_executor(),
               [connection = connection_, reuse] { connection->after_response(reuse); });
  }

 private:
  struct Pending {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    bool ok = false;
  };

  bool write(std::string bytes) {
    if (failed_) return false;
    auto data = std::make_shared<std::string>(std::move(bytes));
    auto pending = std::make_shared<Pending>();
    const auto timeout = connection_->host_.limits().write_timeout;
    asio::post(connection_->stream_.get_executor(), [connection = connection_, data, pending, timeout] {
      connection->stream_.expires_after(timeout);
      asio::async_write(connection->stream_, asio::buffer(*data),
                        [data, pending](beast::error_code ec, size_t) {
                          std::lock_guard<std::mutex> lock(pending->mutex);
                          pending->done = true;
                          pending->ok = !ec;
                          pending->done_cv.notify_all();
                        });
    });
    std::unique_lock<std::mutex> lock(pending->mutex);
    pending->done_cv.wait(lock, [&] { return pending->done; });
    failed_ = !pending->ok;
    return pending->ok;
  }

  std::shared_ptr<Connection> connection_;
  bool started_ = false;
  bool ended_ = false;
  bool chunked_ = false;
  bool keep_alive_ = false;
  bool failed_ = false;
  std::atomic<bool> gone_{false};
};

Connection::Connection(tcp::socket socket, ConnectionHost& host, std::string client)
    : stream_(std::move(socket)), host_(host), client_(std::move(client)) {}

Connection::~Connection() { host_.forget(*this); }

void Connection::start() {
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_request(); });
}

void Connection::refuse() {
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
    HttpResponse response = self->host_.router().error(503, "too many connections; try again shortly");
    response.headers.emplace_back("Retry-After", "1");
    self->keep_alive_ = false;
    self->respond(response);
  });
}

void Connection::close_if_waiting() {
  asio::post(stream_.get_executor(), [self = shared_from_this()] {
    if (self->waiting_.load()) self->close();
  });
}

void Connection::close_soon() {
  asio::post(stream_.get_executor(), [self = shared_from_this()] { self->close(); });
}

bool Connection::keep_alive() const { return keep_alive_ && !host_.draining(); }

void Connection::read_request() {
  if (closed_) return;
  if (host_.draining()) return close();
  parser_.emplace();
  parser_->header_limit(uint32_t(host_.limits().max_head_bytes));
  parser_->body_limit(uint64_t(host_.limits().max_body_bytes));
  waiting_.store(true);
  // One deadline for the whole head (not per read: a client dripping a byte at a time gains
  // nothing); a kept-alive connection may first sit idle for idle_timeout.
  const HttpLimits& limits = host_.limits();
  stream_.expires_after(requests_ == 0 ? limits.head_timeout : limits.idle_timeout + limits.head_timeout);
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->on_head(ec); });
}

void Connection::on_head(beast::error_code ec) {
  if (ec) return on_read_error(ec);
  ++requests_;
  const auto& message = parser_->get();
  keep_alive_ = message.keep_alive();
  version_ = message.version();
  const http::verb method = message.method();
  const bool body_expected = method == http::verb::post || method == http::verb::put || method == http::verb::patch;
  if (body_expected && !parser_->content_length() && !parser_->chunked()) {
    waiting_.store(false);
    return respond_and_close(411, "the request needs a body with Content-Length or Transfer-Encoding: chunked");
  }
  if (parser_->is_done()) return dispatch();
  if (beast::iequals(message[http::field::expect], "100-continue")) {
    // curl and others wait for this before sending a large body.
    auto interim = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
    stream_.expires_after(host_.limits().write_timeout);
    asio::async_write(stream_, asio::buffer(*interim),
                      [self = shared_from_this(), interim](beast::error_code write_ec, size_t) {
                        if (write_ec) return self->close();
                        self->read_body();
                      });
    return;
  }
  read_body();
}

void Connection::read_body() {
  stream_.expires_after(host_.limits().body_timeout);
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
}

void Connection::on_body(beast::error_code ec) {
  if (ec) return on_read_error(ec);
  dispatch();
}

void Connection::on_read_error(beast::error_code ec) {
  waiting_.store(false);
  // A deadline closes the socket (tcp_stream does), so nothing can be answered then.
  if (is_disconnect(ec) || closed_) return close();
  if (ec == http::error::header_limit) {
    return respond_and_close(431, fmt::format("the request head is larger than {} bytes", host_.limits().max_head_bytes));
  }
  if (ec == http::error::body_limit) {
    return respond_and_close(413, fmt::format("the request body is too large (the limit is {} bytes)", host_.limits().max_body_bytes));
  }
  respond_and_close(400, "malformed HTTP request: " + ec.message());
}

void Connection::dispatch() {
  waiting_.store(false);
  auto message = parser_->release();
  HttpRequest request;
  request.method = std::string(message.method_string());
  request.target = std::string(message.target());
  request.path = request.target.substr(0, request.target.find('?'));
  for (const auto& field : message) request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  request.body = std::move(message.body());
  request.client = client_;

  const Router& router = host_.router();
  if (host_.draining()) {
    HttpResponse response = router.error(503, "the server is shutting down");
    response.headers.emplace_back("Retry-After", "5");
    keep_alive_ = false;
    return respond(response);
  }
  const Router::Match match = router.find(request.method, request.path);
  if (match.route == nullptr) {
    if (match.allow.empty()) return respond(router.error(404, fmt::format("no route {} {}", request.method, request.path)));
    HttpResponse response = router.error(
        405, fmt::format("{} is not allowed on {} (allowed: {})", request.method, request.path, match.allow));
    response.headers.emplace_back("Allow", match.allow);
    return respond(response);
  }
  if (std::optional<HttpResponse> refused = router.check(request)) return respond(*refused);
  if (match.route->quick) {
    HttpResponse response;
    try {
      response = match.route->quick(request);
    } catch (const std::exception& e) {
      response = router.error(500, e.what());
    }
    return respond(response);
  }
  auto exchange = std::make_shared<Exchange>(shared_from_this());
  watch(exchange);
  host_.run_blocking([exchange, handler = match.route->blocking, request = std::move(request)] {
    std::string failure;
    try {
      handler(request, *exchange);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    exchange->finish(failure);
  });
}

void Connection::watch(std::shared_ptr<Exchange> exchange) {
  // Bytes already buffered are a pipelined request: a close cannot be told from them, and the
  // socket's readability says nothing about it.
  if (buffer_.size() > 0 || closed_) return;
  stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this(), exchange](beast::error_code ec) {
    if (ec || self->closed_) return;
    char byte = 0;
    const ssize_t n = ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      exchange->mark_gone();
    } else if (n < 0) {
      self->watch(exchange);
    }
    // n > 0: the client sent its next request; it is read once this one is answered.
  });
}

void Connection::respond(const HttpResponse& response, bool linger) {
  const bool reuse = keep_alive();
  auto data = std::make_shared<std::string>(response_text(response, reuse));
  stream_.expires_after(host_.limits().write_timeout);
  asio::async_write(stream_, asio::buffer(*data),
                    [self = shared_from_this(), data, reuse, linger](beast::error_code ec, size_t) {
                      if (linger && !ec) return self->linger_close();
                      self->after_response(reuse && !ec);
                    });
}

void Connection::respond_and_close(int status, const std::string& message) {
  keep_alive_ = false;
  respond(host_.router().error(status, message), /*linger=*/true);
}

void Connection::linger_close() {
  // The client may still be sending what was refused (a body too large): closing with unread
  // bytes would reset the connection and could destroy the answer before the client reads it.
  // Stop sending, then read and drop for up to two seconds in all.
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream_.expires_after(std::chrono::seconds(2));
  drain(std::make_shared<std::array<char, 4096>>());
}

void Connection::drain(std::shared_ptr<std::array<char, 4096>> sink) {
  stream_.async_read_some(asio::buffer(*sink), [self = shared_from_this(), sink](beast::error_code ec, size_t) {
    if (ec) return self->close();
    self->drain(sink);
  });
}

void Connection::after_response(bool keep_alive) {
  if (keep_alive) return read_request();
  close();
}

void Connection::close() {
  if (closed_) return;
  closed_ = true;
  waiting_.store(false);
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.socket().close(ignored);
}

}  // namespace kestrel::server::detail
