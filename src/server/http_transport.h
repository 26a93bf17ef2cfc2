// The HTTP/1.1 layer: event-driven (Boost.Beast over Asio), so connections cost a socket and a
// buffer, not a thread, and a slow or hostile client cannot hold a worker. Every connection runs
// under deadlines for the request head as a whole, the body as a whole, the keep-alive wait and
// each write; connections are capped per client address and in total, and when a cap is reached
// the oldest connection still sending its request (head or body) is closed, so a new client (a health
// probe) always gets in. Requests on one connection are answered in order (pipelining).
// Listening is exclusive: no SO_REUSEPORT, so a second server on a taken port fails to start.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "server/http_router.h"

namespace kestrel::server {

struct HttpLimits {
  std::chrono::milliseconds head_timeout{10000};   // request line and headers, from the first byte
  std::chrono::milliseconds body_timeout{30000};   // the whole body
  std::chrono::milliseconds idle_timeout{5000};    // keep-alive: from a response to the next request
  std::chrono::milliseconds write_timeout{30000};  // each write to the client
  size_t max_head_bytes = 16 << 10;                // larger heads get 431
  size_t max_body_bytes = 4 << 20;                 // larger bodies get 413
  int max_connections = 1024;                      // open at once, all clients together
  int max_connections_per_client = 256;            // open at once from one address
  int io_threads = 2;
};

class HttpTransport {
 public:
  HttpTransport(Router router, HttpLimits limits);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Listens on every address `host` resolves to (an IPv4 or IPv6 address, or a name such as
  // localhost; "::" also takes IPv4 where the system allows). Port 0 picks a free port. Returns
  // the port. Throws kestrel::Error when the host is not an address here or the port is taken.
  int bind(const std::string& host, int port);

  // Serves until a shutdown completes. Call bind() first.
  void serve();

  // Thread-safe and immediate. Stops accepting, closes idle connections, lets running requests
  // finish for up to `grace`, then asks them to end (ResponseStream::aborting) and closes what is
  // left; serve() returns once every handler has ended.
  void shutdown(std::chrono::milliseconds grace);
  // Ends the grace period now (a second signal).
  void abort();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::server
