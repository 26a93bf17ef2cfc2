#include "server/http_server.h"

#include <ctime>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "server/api_error.h"
#include "server/completion_handler.h"
#include "server/openai_response.h"
#include "server/prometheus.h"
#include "server/request_fields.h"

namespace kestrel::server {
namespace {

using json = nlohmann::json;

HttpResponse json_response(const json& body, int status = 200) {
  return HttpResponse{status, "application/json", dump_json(body), {}};
}

// Byte-wise equal in time independent of where they differ (the key is a secret).
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= uint8_t(a[i]) ^ uint8_t(i < b.size() ? b[i] : 0);
  return diff == 0;
}

// "Bearer KEY", the scheme in any case (RFC 7235: auth schemes are case-insensitive).
bool authorized(const HttpRequest& request, const std::string& key) {
  const std::string header = request.header("Authorization");
  const size_t space = header.find(' ');
  if (space == std::string::npos) return false;
  std::string scheme = header.substr(0, space);
  for (char& ch : scheme) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  size_t start = space;
  while (start < header.size() && header[start] == ' ') ++start;
  return scheme == "bearer" && same_secret(header.substr(start), key);
}

std::string percent_decoded(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && std::isxdigit(static_cast<unsigned char>(text[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      out += char(std::stoi(text.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

nlohmann::ordered_json parse_body(const HttpRequest& request) {
  auto body = nlohmann::ordered_json::parse(request.body, nullptr, false);
  if (body.is_discarded()) throw ApiError(400, "malformed JSON body", "invalid_request_error", "", "invalid_json");
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return body;
}

}  // namespace

struct HttpServer::Impl {
  AsyncEngine& engine;
  ServerOptions options;
  CompletionContext completions;
  std::unique_ptr<HttpTransport> transport;

  Impl(AsyncEngine& e, const chat::ChatTemplate* t, ServerOptions o)
      : engine(e), options(std::move(o)), completions{e, t, options.model_name, options.json_any_whitespace} {
    transport = std::make_unique<HttpTransport>(routes(), options.limits);
  }

  json model_json() const {
    return {{"id", options.model_name}, {"object", "model"}, {"created", int64_t(std::time(nullptr))},
            {"owned_by", "kestrel"}, {"max_model_len", engine.max_request_tokens()}};
  }

  Router routes();
  HttpResponse tokenize(const HttpRequest& request) const;
  HttpResponse detokenize(const HttpRequest& request) const;
};

Router HttpServer::Impl::routes() {
  Router router;
  router.error_body([](int status, const std::string& message) {
    const char* type = status == 404 ? "not_found_error" : status >= 500 ? "server_error" : "invalid_request_error";
    return error_response(ApiError(status, message, type));
  });
  // Authentication for everything but the probes (/health) and the scraper (/metrics).
  router.before([this](const HttpRequest& request) -> std::optional<HttpResponse> {
    if (options.api_key.empty() || request.path == "/health" || request.path == "/metrics") return std::nullopt;
    if (authorized(request, options.api_key)) return std::nullopt;
    HttpResponse response = error_response(ApiError(401, "invalid API key: send 'Authorization: Bearer <key>'",
                                                    "authentication_error", "", "invalid_api_key"));
    response.headers.emplace_back("WWW-Authenticate", "Bearer");
    return response;
  });

  // A failed process group (a rank died) is unhealthy for good: load balancers stop sending.
  router.quick("GET", "/health", [this](const HttpRequest&) {
    if (const std::optional<std::string> failure = engine.group_failure()) {
      return json_response({{"status", "error"}, {"error", *failure}}, 503);
    }
    return json_response({{"status", "ok"}});
  });
  router.quick("GET", "/metrics", [this](const HttpRequest&) {
    return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8",
                        render_prometheus(engine.metrics(), options.model_name), {}};
  });
  router.quick("GET", "/v1/models", [this](const HttpRequest&) {
    return json_response({{"object", "list"}, {"data", json::array({model_json()})}});
  });
  // Model ids may hold slashes ("Qwen/Qwen2.5-0.5B"): everything after the prefix is the id.
  router.quick("GET", "/v1/models/*", [this](const HttpRequest& request) {
    const std::string id = percent_decoded(request.path.substr(std::string("/v1/models/").size()));
    if (id != options.model_name) {
      return error_response(ApiError(404, fmt::format("the model '{}' does not exist (this server serves '{}')", id,
                                                      options.model_name),
                                      "not_found_error", "model", "model_not_found"));
    }
    return json_response(model_json());
  });
  router.blocking("POST", "/v1/completions", [this](const HttpRequest& request, ResponseStream& out) {
    handle_completion(completions, request, out, Endpoint::Completions);
  });
  router.blocking("POST", "/v1/chat/completions", [this](const HttpRequest& request, ResponseStream& out) {
    handle_completion(completions, request, out, Endpoint::ChatCompletions);
  });
  router.blocking("POST", "/tokenize", [this](const HttpRequest& request, ResponseStream& out) {
    out.send(tokenize(request));
  });
  router.blocking("POST", "/detokenize", [this](const HttpRequest& request, ResponseStream& out) {
    out.send(detokenize(request));
  });
  return router;
}

// llama-server's shapes: {"content", "add_special" = false, "parse_special" = true,
// "with_pieces" = false} -> {"tokens": [id, ...]} or {"tokens": [{"id", "piece"}, ...]}, a piece
// that is not valid UTF-8 given as its bytes.
HttpResponse HttpServer::Impl::tokenize(const HttpRequest& request) const {
  try {
    const auto body = parse_body(request);
    const auto* content = field(body, "content");
    if (content == nullptr || !content->is_string()) bad("content", "'content' must be a string");
    static const std::set<std::string> kFields = {"content", "add_special", "parse_special", "with_pieces"};
    refuse_unknown_fields(body, {&kFields});
    const Tokenizer& tokenizer = engine.tokenizer();
    const std::vector<TokenId> tokens = tokenizer.encode(content->get<std::string>(), boolean(body, "add_special", false),
                                                         boolean(body, "parse_special", true));
    json out = json::array();
    const bool with_pieces = boolean(body, "with_pieces", false);
    for (TokenId id : tokens) {
      if (!with_pieces) {
        out.push_back(id);
        continue;
      }
      const std::string piece = tokenizer.token_to_piece(id, true);
      json text = json(piece);
      try {
        (void)text.dump();
      } catch (const json::type_error&) {
        text = json::array();
        for (unsigned char ch : piece) text.push_back(int(ch));
      }
      out.push_back({{"id", id}, {"piece", text}});
    }
    return json_response({{"tokens", out}});
  } catch (const ApiError& e) {
    return error_response(e);
  }
}

HttpResponse HttpServer::Impl::detokenize(const HttpRequest& request) const {
  try {
    const auto body = parse_body(request);
    const auto* tokens = field(body, "tokens");
    if (tokens == nullptr || !tokens->is_array()) bad("tokens", "'tokens' must be a list of token ids");
    static const std::set<std::string> kFields = {"tokens"};
    refuse_unknown_fields(body, {&kFields});
    const Tokenizer& tokenizer = engine.tokenizer();
    std::vector<TokenId> ids;
    for (const auto& t : *tokens) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tokenizer.vocab_size()) {
        bad("tokens", fmt::format("'tokens' must hold token ids from 0 to {}", tokenizer.vocab_size() - 1));
      }
      ids.push_back(TokenId(t.get<int64_t>()));
    }
    return json_response({{"content", tokenizer.decode(ids, false)}});
  } catch (const ApiError& e) {
    return error_response(e);
  }
}

HttpServer::HttpServer(AsyncEngine& engine, const chat::ChatTemplate* chat_template, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, chat_template, std::move(options))) {}

HttpServer::~HttpServer() = default;

int HttpServer::bind() { return impl_->transport->bind(impl_->options.host, impl_->options.port); }

void HttpServer::serve() { impl_->transport->serve(); }

void HttpServer::shutdown() { impl_->transport->shutdown(impl_->options.shutdown_timeout); }

void HttpServer::abort() { impl_->transport->abort(); }

}  // namespace kestrel::server
