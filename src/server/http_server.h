// The OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions (streaming with SSE or
// not), /v1/models (and /v1/models/{id}), llama-server's /tokenize and /detokenize, /health and
// /metrics, over the event-driven HTTP layer (http_transport.h). Generation requests run on their
// own handler threads and talk to the engine only through AsyncEngine.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "chat/chat_template.h"
#include "engine/async_engine.h"
#include "server/http_transport.h"

namespace kestrel::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                      // 0: any free port
  std::string api_key;                  // empty: no authentication
  std::string model_name = "kestrel";   // the id served under /v1/models
  HttpLimits limits;                    // deadlines, sizes and connection caps
  // On shutdown, how long running requests may go on before they are ended with an error.
  std::chrono::milliseconds shutdown_timeout{10000};
  // Constrained JSON may hold free whitespace (at most 20 characters in a row) unless a request
  // says otherwise (structured_outputs.disable_any_whitespace); false: compact JSON only.
  bool json_any_whitespace = true;
};

class HttpServer {
 public:
  // chat_template may be null: chat requests then get a clear 400.
  HttpServer(AsyncEngine& engine, const chat::ChatTemplate* chat_template, ServerOptions options);
  ~HttpServer();

  // Binds the socket(s); returns the port (useful with port 0). Throws kestrel::Error on failure.
  int bind();
  // Serves until a shutdown completes.
  void serve();
  // From any thread: stop accepting, let running requests finish for options.shutdown_timeout,
  // then end them (streams get an error event, waiting requests a 503).
  void shutdown();
  // From any thread: end running requests now (a second signal).
  void abort();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::server
