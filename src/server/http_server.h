// The OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions (streaming with SSE or
// not), /v1/models, /health, /metrics. cpp-httplib does the HTTP; every request runs on its own
// connection thread and talks to the engine only through AsyncEngine.
#pragma once

#include <memory>
#include <string>

#include "chat/chat_template.h"
#include "engine/async_engine.h"

namespace kestrel::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                      // 0: any free port
  std::string api_key;                  // empty: no authentication
  std::string model_name = "kestrel";   // the id served under /v1/models
  size_t max_body_bytes = 4 << 20;      // larger bodies get 413
  int http_threads = 128;               // concurrent connections served
  // Constrained JSON may hold free whitespace (at most 20 characters in a row) unless a request
  // says otherwise (structured_outputs.disable_any_whitespace); false: compact JSON only.
  bool json_any_whitespace = true;
};

class HttpServer {
 public:
  // chat_template may be null: chat requests then get a clear 400.
  HttpServer(AsyncEngine& engine, const chat::ChatTemplate* chat_template, ServerOptions options);
  ~HttpServer();

  // Binds the socket; returns the port (useful with port 0). Throws kestrel::Error on failure.
  int bind();
  // Serves until stop() is called from another thread (or a signal handler's thread).
  void serve();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::server
