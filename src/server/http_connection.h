// One client connection of the HTTP layer (internal to http_transport): reads requests one after
// another under the transport's deadlines, answers quick routes on its strand, hands blocking ones
// to a handler thread with a ResponseStream, and watches for the client leaving meanwhile.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <utility>  // Boost 1.74's Asio uses std::exchange without including it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "server/http_router.h"
#include "server/http_transport.h"

namespace kestrel::server::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

class Connection;
class Exchange;

// What a connection needs from the transport that owns it.
class ConnectionHost {
 public:
  virtual ~ConnectionHost() = default;
  virtual const Router& router() const = 0;
  virtual const HttpLimits& limits() const = 0;
  virtual bool draining() const = 0;  // shutting down: no new requests
  virtual bool aborting() const = 0;  // the grace period is over
  virtual void run_blocking(std::function<void()> work) = 0;
  virtual void forget(Connection& connection) = 0;  // from the destructor
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, ConnectionHost& host, std::string client);
  ~Connection();

  void start();
  // The caps are reached and nobody could make room: a 503 and the connection closes.
  void refuse();
  // Called from any thread; runs on the connection's strand.
  // Only while it waits for a request (its head or body: nothing of it runs yet), for eviction and
  // shutdown.
  void close_if_waiting();
  void close_soon();        // whatever it is doing

  bool waiting_for_request() const { return waiting_.load(); }
  const std::string& client() const { return client_; }

  // The transport's bookkeeping: where this connection sits in its registry, and whether it was
  // already picked for eviction.
  std::list<std::weak_ptr<Connection>>::iterator registry_entry;
  std::atomic<bool> evicting{false};

 private:
  friend class Exchange;

  void read_request();
  void on_head(beast::error_code ec);
  void read_body();
  void on_body(beast::error_code ec);
  void on_read_error(beast::error_code ec);
  void dispatch();
  void respond(const HttpResponse& response, bool linger = false);
  // An error after which the connection closes (what the client still sends is drained first).
  void respond_and_close(int status, const std::string& message);
  void linger_close();
  void drain(std::shared_ptr<std::array<char, 4096>> sink);
  void after_response(bool keep_alive);
  void watch(std::shared_ptr<Exchange> exchange);
  void close();
  bool keep_alive() const;

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  ConnectionHost& host_;
  std::string client_;
  std::atomic<bool> waiting_{false};
  bool keep_alive_ = true;   // the current request allows another one after it
  unsigned version_ = 11;    // of the current request: HTTP/1.0 gets no chunked responses
  int64_t requests_ = 0;
  bool closed_ = false;
};

}  // namespace kestrel::server::detail
