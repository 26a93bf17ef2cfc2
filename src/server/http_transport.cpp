#include "server/http_transport.h"

#include <condition_variable>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "server/http_connection.h"

namespace kestrel::server {

using detail::Connection;
namespace asio = detail::asio;
namespace beast = detail::beast;
using tcp = detail::tcp;
using namespace std::chrono_literals;

struct HttpTransport::Impl final : detail::ConnectionHost {
  Impl(Router r, HttpLimits l) : router_(std::move(r)), limits_(l) {}

  ~Impl() override {
    ioc_.stop();
    for (auto& thread : io_threads_) thread.join();
  }

  const Router& router() const override { return router_; }
  const HttpLimits& limits() const override { return limits_; }
  bool draining() const override { return draining_.load(); }
  bool aborting() const override { return aborting_.load(); }

  void run_blocking(std::function<void()> work) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++handlers_;
    }
    std::thread([this, work = std::move(work)]() mutable {
      {
        auto run = std::move(work);  // destroyed (connection references and all) before the count drops
        run();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      --handlers_;
      changed_.notify_all();
    }).detach();
  }

  void forget(Connection& connection) override {
    std::lock_guard<std::mutex> lock(mutex_);
    connections_.erase(connection.registry_entry);
    if (--per_client_[connection.client()] == 0) per_client_.erase(connection.client());
  }

  void accept(tcp::acceptor& acceptor);
  void admit(tcp::socket socket);
  // Every registered connection, alive; to be acted on outside the lock.
  std::vector<std::shared_ptr<Connection>> snapshot();
  void serve();

  // Declared before ioc_: handlers destroyed with the io_context still unregister here.
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::list<std::weak_ptr<Connection>> connections_;  // in accept order, oldest first
  std::map<std::string, int> per_client_;
  int handlers_ = 0;
  bool shutdown_requested_ = false;
  bool abort_requested_ = false;
  std::chrono::steady_clock::time_point grace_end_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> aborting_{false};

  Router router_;
  HttpLimits limits_;
  asio::io_context ioc_;
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors_;
  std::vector<std::thread> io_threads_;
};

void HttpTransport::Impl::accept(tcp::acceptor& acceptor) {
  acceptor.async_accept(asio::make_strand(ioc_), [this, &acceptor](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) {
      admit(std::move(socket));
      return accept(acceptor);
    }
    // Out of file descriptors (or a similar passing failure): pause rather than spin.
    auto pause = std::make_shared<asio::steady_timer>(ioc_, 50ms);
    pause->async_wait([this, &acceptor, pause](beast::error_code) {
      if (acceptor.is_open()) accept(acceptor);
    });
  });
}

void HttpTransport::Impl::admit(tcp::socket socket) {
  beast::error_code ec;
  const tcp::endpoint peer = socket.remote_endpoint(ec);
  if (ec) return;  // gone already
  asio::ip::address address = peer.address();
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    address = asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
  }
  auto connection = std::make_shared<Connection>(std::move(socket), *this, address.to_string());

  // At a cap, the oldest connection still sending its request (head or body) makes room (a slow or
  // idle client), never one whose request is running; without one the newcomer is refused.
  std::vector<std::shared_ptr<Connection>> alive;  // released after the lock: a destructor takes it
  std::vector<std::shared_ptr<Connection>> evict;
  bool refuse = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    connection->registry_entry = connections_.insert(connections_.end(), connection);
    const int from_client = ++per_client_[connection->client()];
    const int total = int(connections_.size());
    const bool client_full = from_client > limits_.max_connections_per_client;
    const bool server_full = total > limits_.max_connections;
    if (client_full || server_full) {
      for (const auto& weak : connections_) {
        std::shared_ptr<Connection> c = weak.lock();
        if (!c) continue;
        alive.push_back(c);
        if (c == connection || !c->waiting_for_request() || c->evicting.load()) continue;
        if (client_full && c->client() != connection->client()) continue;
        c->evicting.store(true);
        evict.push_back(c);
        break;
      }
      refuse = evict.empty();
    }
  }
  for (auto& c : evict) c->close_if_waiting();
  if (refuse) {
    connection->refuse();
  } else {
    connection->start();
  }
}

std::vector<std::shared_ptr<Connection>> HttpTransport::Impl::snapshot() {
  std::vector<std::shared_ptr<Connection>> alive;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& weak : connections_) {
    if (auto c = weak.lock()) alive.push_back(std::move(c));
  }
  return alive;
}

void HttpTransport::Impl::serve() {
  auto guard = asio::make_work_guard(ioc_);
  for (auto& acceptor : acceptors_) accept(*acceptor);
  for (int i = 0; i < std::max(1, limits_.io_threads); ++i) io_threads_.emplace_back([this] { ioc_.run(); });

  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return shutdown_requested_; });
  lock.unlock();
  // Stop accepting (new connections are refused by the system) and close idle connections.
  asio::post(ioc_, [this] {
    for (auto& acceptor : acceptors_) {
      beast::error_code ignored;
      acceptor->close(ignored);
    }
  });
  for (auto& c : snapshot()) c->close_if_waiting();
  lock.lock();
  changed_.wait_until(lock, grace_end_, [&] { return handlers_ == 0 || abort_requested_; });
  if (handlers_ > 0) {
    // The grace period is over: handlers end their requests with an error; a write that still
    // hangs fails once its connection closes.
    aborting_.store(true);
    changed_.wait_for(lock, 3s, [&] { return handlers_ == 0; });
    lock.unlock();
    for (auto& c : snapshot()) c->close_soon();
    lock.lock();
    changed_.wait(lock, [&] { return handlers_ == 0; });
  }
  lock.unlock();
  for (auto& c : snapshot()) c->close_soon();
  guard.reset();
  ioc_.stop();
  for (auto& thread : io_threads_) thread.join();
  io_threads_.clear();
}

HttpTransport::HttpTransport(Router router, HttpLimits limits)
    : impl_(std::make_unique<Impl>(std::move(router), limits)) {}

HttpTransport::~HttpTransport() = default;

int HttpTransport::bind(const std::string& host, int port) {
  Impl& s = *impl_;
  beast::error_code ec;
  tcp::resolver resolver(s.ioc_);
  const auto results = resolver.resolve(host, std::to_string(port),
                                        tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    fail("cannot listen on '{}': not an address or host name here ({})", host, ec ? ec.message() : "no address");
  }
  int bound_port = port;
  std::string first_error;
  for (const auto& result : results) {
    tcp::endpoint endpoint = result.endpoint();
    endpoint.port(uint16_t(bound_port));  // port 0: every address gets the port the first one got
    auto acceptor = std::make_unique<tcp::acceptor>(s.ioc_);
    acceptor->open(endpoint.protocol(), ec);
    // SO_REUSEADDR only lets the port be taken again while old connections linger in TIME_WAIT;
    // on Linux a second listener is still refused. SO_REUSEPORT (which would allow it) is never set.
    if (!ec) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec && endpoint.address().is_v6()) {
      acceptor->set_option(asio::ip::v6_only(!endpoint.address().is_unspecified()), ec);
    }
    if (!ec) acceptor->bind(endpoint, ec);
    if (ec == asio::error::address_in_use) {
      fail("cannot listen on {}:{}: the port is in use (is another server running?)", host, bound_port);
    }
    if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      if (first_error.empty()) first_error = fmt::format("{}: {}", endpoint.address().to_string(), ec.message());
      continue;  // e.g. localhost's ::1 on a host without IPv6
    }
    bound_port = acceptor->local_endpoint().port();
    s.acceptors_.push_back(std::move(acceptor));
  }
  if (s.acceptors_.empty()) fail("cannot listen on {}:{}: {}", host, port, first_error);
  return bound_port;
}

void HttpTransport::serve() { impl_->serve(); }

void HttpTransport::shutdown(std::chrono::milliseconds grace) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mutex_);
  if (!s.shutdown_requested_) {
    s.shutdown_requested_ = true;
    s.grace_end_ = std::chrono::steady_clock::now() + grace;
    s.draining_.store(true);
  }
  s.changed_.notify_all();
}

void HttpTransport::abort() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mutex_);
  if (!s.shutdown_requested_) s.grace_end_ = std::chrono::steady_clock::now();
  s.shutdown_requested_ = true;
  s.abort_requested_ = true;
  s.draining_.store(true);
  s.changed_.notify_all();
}

}  // namespace kestrel::server
