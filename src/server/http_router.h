// What the HTTP layer hands to the application and takes back: requests, responses, the response
// stream of a long-running handler, and the route table (exact paths and prefixes, per method, so
// a wrong method on a real path is a 405 with Allow, not a 404).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kestrel::server {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;
  std::string target;  // as sent, with the query
  std::string path;    // the target without its query
  HttpHeaders headers;
  std::string body;
  std::string client;  // the peer's address

  // The first header of that name (names compare case-insensitively), or "" if there is none.
  std::string header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers;
};

// How a long-running handler answers, from its own thread: one whole response, or a chunked
// stream. Each call returns once its bytes are written (false: the client is gone or a write
// missed its deadline; the handler should stop).
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  virtual bool send(const HttpResponse& response) = 0;
  virtual bool begin_chunked(int status, const std::string& content_type, const HttpHeaders& headers) = 0;
  virtual bool write_chunk(std::string_view data) = 0;
  virtual bool end_chunked() = 0;
  // The client closed its side while the handler works (a request that waits without writing
  // learns this way that nobody is listening).
  virtual bool client_gone() const = 0;
  // Shutdown's grace period is over: end now, with an error the client can see.
  virtual bool aborting() const = 0;
};

// Quick handlers run on the I/O threads and must not block; blocking ones get their own thread.
using QuickHandler = std::function<HttpResponse(const HttpRequest&)>;
using BlockingHandler = std::function<void(const HttpRequest&, ResponseStream&)>;

struct Route {
  QuickHandler quick;
  BlockingHandler blocking;
};

class Router {
 public:
  // A path ending in '*' matches every path with that prefix (e.g. "/v1/models/*").
  void quick(const std::string& method, const std::string& path, QuickHandler handler);
  void blocking(const std::string& method, const std::string& path, BlockingHandler handler);
  // Runs before every route; a response it returns is sent instead (authentication).
  void before(std::function<std::optional<HttpResponse>(const HttpRequest&)> check) { before_ = std::move(check); }
  // Builds the body of the errors the HTTP layer answers by itself (404, 405, 408, 413, ...).
  void error_body(std::function<HttpResponse(int status, const std::string& message)> make) {
    error_body_ = std::move(make);
  }

  struct Match {
    const Route* route = nullptr;  // null: no route for this method
    std::string allow;             // the path's methods when route is null ("" if none: a 404)
  };
  Match find(const std::string& method, const std::string& path) const;
  std::optional<HttpResponse> check(const HttpRequest& request) const {
    return before_ ? before_(request) : std::nullopt;
  }
  HttpResponse error(int status, const std::string& message) const;

 private:
  // path (or prefix, without the '*') -> method -> route
  std::map<std::string, std::map<std::string, Route>> exact_;
  std::map<std::string, std::map<std::string, Route>> prefixes_;
  std::function<std::optional<HttpResponse>(const HttpRequest&)> before_;
  std::function<HttpResponse(int, const std::string&)> error_body_;

  void add(const std::string& method, const std::string& path, Route route);
};

}  // namespace kestrel::server
