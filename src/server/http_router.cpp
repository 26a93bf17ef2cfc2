#include "server/http_router.h"

#include <strings.h>

namespace kestrel::server {

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key.size() == name.size() && strncasecmp(key.data(), name.data(), name.size()) == 0) return value;
  }
  return "";
}

void Router::add(const std::string& method, const std::string& path, Route route) {
  if (!path.empty() && path.back() == '*') {
    prefixes_[path.substr(0, path.size() - 1)][method] = std::move(route);
  } else {
    exact_[path][method] = std::move(route);
  }
}

void Router::quick(const std::string& method, const std::string& path, QuickHandler handler) {
  add(method, path, Route{std::move(handler), {}});
}

void Router::blocking(const std::string& method, const std::string& path, BlockingHandler handler) {
  add(method, path, Route{{}, std::move(handler)});
}

Router::Match Router::find(const std::string& method, const std::string& path) const {
  const std::map<std::string, Route>* methods = nullptr;
  if (const auto it = exact_.find(path); it != exact_.end()) {
    methods = &it->second;
  } else {
    // The longest prefix wins; a prefix route needs something after the prefix.
    size_t best = 0;
    for (const auto& [prefix, routes] : prefixes_) {
      if (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 && prefix.size() >= best) {
        best = prefix.size();
        methods = &routes;
      }
    }
  }
  Match match;
  if (methods == nullptr) return match;
  if (const auto it = methods->find(method); it != methods->end()) {
    match.route = &it->second;
    return match;
  }
  for (const auto& [name, route] : *methods) match.allow += (match.allow.empty() ? "" : ", ") + name;
  return match;
}

HttpResponse Router::error(int status, const std::string& message) const {
  if (error_body_) {
    HttpResponse response = error_body_(status, message);
    response.status = status;
    return response;
  }
  return HttpResponse{status, "text/plain; charset=utf-8", message + "\n", {}};
}

}  // namespace kestrel::server
