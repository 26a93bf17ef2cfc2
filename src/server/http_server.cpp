#include "server/http_server.h"

#include <httplib.h>

#include <chrono>
#include <ctime>
#include <random>

#include <fmt/format.h>

#include "core/error.h"
#include "server/api_error.h"
#include "server/completion_run.h"
#include "server/openai_response.h"
#include "server/prometheus.h"
#include "server/tool_calls.h"

namespace kestrel::server {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

// How long a response may go without a byte: a stream then sends an SSE comment and a
// non-streaming response a space (JSON allows leading whitespace). Writing is the only way to
// notice a client that went away, so it is also how an abandoned request gets aborted.
constexpr auto kHeartbeat = 1000ms;

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(dump_json(error_json(e.status(), e.what(), e.type(), e.param(), e.code())),
                  "application/json");
}

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}", prefix, rng());
}

bool write_all(httplib::DataSink& sink, const std::string& data) {
  return sink.write(data.data(), data.size());
}

// A content provider runs after the handler returned, outside httplib's exception handling: an
// exception there must end this response (the connection closes), never the process.
template <typename Body>
std::function<bool(size_t, httplib::DataSink&)> guarded(Body body) {
  return [body = std::move(body)](size_t, httplib::DataSink& sink) mutable {
    try {
      return body(sink);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kestrel: response failed: %s\n", e.what());
      return false;
    }
  };
}

}  // namespace

struct HttpServer::Impl {
  AsyncEngine& engine;
  const chat::ChatTemplate* chat_template;
  ServerOptions options;
  httplib::Server http;
  int bound_port = -1;

  Impl(AsyncEngine& e, const chat::ChatTemplate* t, ServerOptions o)
      : engine(e), chat_template(t), options(std::move(o)) {}

  void install_routes();
  void handle_generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  void stream_response(std::shared_ptr<CompletionRun> run, std::shared_ptr<ParsedRequest> request,
                       httplib::Response& res);
  void full_response(std::shared_ptr<CompletionRun> run, std::shared_ptr<ParsedRequest> request,
                     httplib::Response& res);
};

void HttpServer::Impl::install_routes() {
  const int threads = options.http_threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  http.set_payload_max_length(options.max_body_bytes);
  http.set_read_timeout(30, 0);
  http.set_write_timeout(30, 0);
  http.set_keep_alive_timeout(5);

  // Authentication for the API routes; /health and /metrics stay open for probes and scrapers.
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options.api_key.empty() || req.path.rfind("/v1/", 0) != 0) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    if (req.get_header_value("Authorization") != "Bearer " + options.api_key) {
      send_error(res, ApiError(401, "invalid API key: send 'Authorization: Bearer <key>'",
                               "authentication_error", "", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Errors httplib produces itself (unknown route, body too large, bad request line) get bodies
  // in OpenAI's format too.
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = fmt::format("HTTP {}", res.status);
    std::string type = "invalid_request_error";
    if (res.status == 404) {
      message = fmt::format("no route {} {}", req.method, req.path);
      type = "not_found_error";
    } else if (res.status == 413) {
      message = "the request body is too large";
    }
    res.set_content(dump_json(error_json(res.status, message, type, "", "")), "application/json");
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string message = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      message = e.what();
    }
    send_error(res, ApiError(500, message, "internal_error"));
  });

  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(render_prometheus(engine.metrics(), options.model_name),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json model = {{"id", options.model_name}, {"object", "model"}, {"created", int64_t(std::time(nullptr))},
                        {"owned_by", "kestrel"}, {"max_model_len", engine.max_request_tokens()}};
    res.set_content(dump_json({{"object", "list"}, {"data", json::array({model})}}), "application/json");
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(req, res, Endpoint::Completions);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(req, res, Endpoint::ChatCompletions);
  });
}

void HttpServer::Impl::handle_generate(const httplib::Request& req, httplib::Response& res,
                                       Endpoint endpoint) {
  try {
    nlohmann::ordered_json body;
    try {
      body = nlohmann::ordered_json::parse(req.body);
    } catch (const nlohmann::ordered_json::parse_error& e) {
      throw ApiError(400, fmt::format("malformed JSON body: {}", e.what()));
    }
    auto request = std::make_shared<ParsedRequest>(
        endpoint == Endpoint::Completions
            ? parse_completion_request(body, engine.tokenizer())
            : parse_chat_request(body, engine.tokenizer(), chat_template));
    if (!request->model.empty() && request->model != options.model_name) {
      throw ApiError(404, fmt::format("the model '{}' does not exist (this server serves '{}')",
                                      request->model, options.model_name),
                     "not_found_error", "model", "model_not_found");
    }
    prepare_constraint(engine, *request, options.json_any_whitespace);
    auto run = std::make_shared<CompletionRun>(engine, *request);
    if (request->stream) {
      stream_response(std::move(run), std::move(request), res);
    } else {
      full_response(std::move(run), std::move(request), res);
    }
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

void HttpServer::Impl::stream_response(std::shared_ptr<CompletionRun> run,
                                       std::shared_ptr<ParsedRequest> request, httplib::Response& res) {
  const std::string id = random_id(request->endpoint == Endpoint::Completions ? "cmpl-" : "chatcmpl-");
  const int64_t created = int64_t(std::time(nullptr));
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", guarded([this, run, request, id, created](httplib::DataSink& sink) {
        const Tokenizer& tokenizer = engine.tokenizer();
        const std::string& model = options.model_name;
        auto send = [&](const json& chunk) { return write_all(sink, "data: " + dump_json(chunk) + "\n\n"); };
        std::vector<size_t> offsets(size_t(run->num_choices()), 0);
        std::vector<int64_t> completion(size_t(run->num_choices()), 0);
        std::vector<DraftCounts> drafts(size_t(run->num_choices()));
        int64_t cached = 0;
        bool ok = true;
        for (int i = 0; i < run->num_choices() && ok; ++i) {
          const bool chat = request->endpoint == Endpoint::ChatCompletions;
          const std::string echo = request->echo ? request->prompt_texts[size_t(i / request->n)] : "";
          if (chat || !echo.empty()) {
            ok = send(stream_chunk(*request, i, echo, {}, FinishReason::None, tokenizer, id, created,
                                   model, 0, chat));
          }
          offsets[size_t(i)] = echo.size();
        }
        std::string failure;
        bool done = false;
        const bool tools = request->endpoint == Endpoint::ChatCompletions &&
                           request->structured.tool_choice != ToolChoice::None;
        std::vector<std::string> held(size_t(run->num_choices()));      // tool choices' text until they end
        std::vector<std::string> call_ids(size_t(run->num_choices()));  // a named tool choice's call
        while (ok && !done) {
          bool wrote = false;
          done = run->pump(kHeartbeat, [&](int choice, GenerationEvent& event) {
            completion[size_t(choice)] = event.completion_tokens;
            drafts[size_t(choice)] = {event.draft_tokens, event.accepted_draft_tokens};
            if (event.finished && choice % request->n == 0) cached += event.cached_prompt_tokens;
            if (event.finish_reason == FinishReason::Error) failure = event.error;
            if (event.text.empty() && event.tokens.empty() && !event.finished) return;
            if (!ok) return;
            if (tools && request->structured.tool_choice == ToolChoice::Named) {
              // The call is known from the start: its arguments stream as they are generated.
              std::string& call_id = call_ids[size_t(choice)];
              if (call_id.empty()) {
                call_id = new_tool_call_id();
                ok = send(tool_arguments_chunk(*request, choice, call_id, request->structured.named_tool, "", nullptr, id,
                                               created, model));
              }
              if (ok && !event.text.empty()) {
                ok = send(tool_arguments_chunk(*request, choice, "", "", event.text, nullptr, id, created, model));
              }
              if (ok && event.finished && event.finish_reason != FinishReason::Error) {
                ok = send(tool_arguments_chunk(*request, choice, "", "", "",
                                               event.finish_reason == FinishReason::Length ? "length" : "stop", id,
                                               created, model));
              }
              wrote = true;
              return;
            }
            if (tools) {
              held[size_t(choice)] += event.text;
              if (!event.finished || event.finish_reason == FinishReason::Error) return;
              ok = send(tool_reply_chunk(*request, choice, held[size_t(choice)], event.finish_reason, id, created, model));
              wrote = true;
              return;
            }
            ok = send(stream_chunk(*request, choice, event.text, event.tokens,
                                   event.finished ? event.finish_reason : FinishReason::None,
                                   tokenizer, id, created, model, offsets[size_t(choice)], false));
            offsets[size_t(choice)] += event.text.size();
            wrote = true;
          });
          if (ok && !wrote && !done) ok = write_all(sink, ": keep-alive\n\n");
        }
        if (!ok) return false;  // the client is gone: ~CompletionRun aborts what is left
        if (!failure.empty()) {
          send(error_json(500, failure, "internal_error", "", ""));
        } else if (request->include_usage) {
          int64_t total = 0;
          for (int64_t c : completion) total += c;
          DraftCounts all;
          for (const DraftCounts& d : drafts) all.draft_tokens += d.draft_tokens, all.accepted_tokens += d.accepted_tokens;
          send(usage_chunk(*request, id, created, model, run->prompt_tokens(), total, cached,
                           engine.speculative() ? &all : nullptr));
        }
        write_all(sink, "data: [DONE]\n\n");
        sink.done();
        return true;
      }));
}

void HttpServer::Impl::full_response(std::shared_ptr<CompletionRun> run,
                                     std::shared_ptr<ParsedRequest> request, httplib::Response& res) {
  res.set_chunked_content_provider("application/json", guarded([this, run, request](httplib::DataSink& sink) {
    std::vector<ChoiceResult> choices(size_t(run->num_choices()));
    int64_t cached = 0;
    bool done = false;
    while (!done) {
      done = run->pump(kHeartbeat, [&](int choice, GenerationEvent& event) {
        ChoiceResult& c = choices[size_t(choice)];
        c.text += event.text;
        for (auto& t : event.tokens) c.tokens.push_back(std::move(t));
        c.completion_tokens = event.completion_tokens;
        c.draft_tokens = event.draft_tokens;
        c.accepted_draft_tokens = event.accepted_draft_tokens;
        if (event.finished) {
          c.finish_reason = event.finish_reason;
          c.error = event.error;
          if (choice % request->n == 0) cached += event.cached_prompt_tokens;
        }
      });
      if (!done && !write_all(sink, " ")) return false;  // the client is gone
    }
    json body;
    for (const ChoiceResult& c : choices) {
      if (c.finish_reason == FinishReason::Error) {
        body = error_json(500, "generation failed: " + c.error, "internal_error", "", "");
      }
    }
    if (body.is_null()) {
      body = completion_response(*request, choices, engine.tokenizer(),
                                 random_id(request->endpoint == Endpoint::Completions ? "cmpl-" : "chatcmpl-"),
                                 int64_t(std::time(nullptr)), options.model_name, run->prompt_tokens(), cached,
                                 engine.speculative());
    }
    write_all(sink, dump_json(body));
    sink.done();
    return true;
  }));
}

HttpServer::HttpServer(AsyncEngine& engine, const chat::ChatTemplate* chat_template, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, chat_template, std::move(options))) {
  impl_->install_routes();
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  Impl& s = *impl_;
  if (s.options.port == 0) {
    s.bound_port = s.http.bind_to_any_port(s.options.host);
  } else if (s.http.bind_to_port(s.options.host, s.options.port)) {
    s.bound_port = s.options.port;
  }
  if (s.bound_port <= 0) fail("cannot listen on {}:{} (in use, or not an address here)", s.options.host, s.options.port);
  return s.bound_port;
}

void HttpServer::serve() { impl_->http.listen_after_bind(); }

void HttpServer::stop() { impl_->http.stop(); }

}  // namespace kestrel::server
