// The handler behind /v1/completions and /v1/chat/completions: parses the body, submits the
// choices to the engine and answers as a stream (SSE) or as one response. A non-streaming
// response keeps its status until the result is known (a failure is a real error status), and
// notices a client that left by the socket, not by writing to it. On shutdown's deadline a
// stream ends with an error event and a waiting response becomes a 503.
#pragma once

#include <string>

#include "chat/chat_template.h"
#include "engine/async_engine.h"
#include "server/api_error.h"
#include "server/http_router.h"
#include "server/openai_request.h"

namespace kestrel::server {

struct CompletionContext {
  AsyncEngine& engine;
  const chat::ChatTemplate* chat_template;  // null: chat requests are a 400
  std::string model_name;
  bool json_any_whitespace = true;
};

void handle_completion(const CompletionContext& context, const HttpRequest& request, ResponseStream& out,
                       Endpoint endpoint);

// An ApiError as an OpenAI error response (503s carry Retry-After).
HttpResponse error_response(const ApiError& error);

}  // namespace kestrel::server
