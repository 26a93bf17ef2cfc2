// Reading fields of an OpenAI request body, shared by the request parsers: a field given as null
// counts as absent, and every bad value is an ApiError(400) naming the parameter.
#pragma once

#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace kestrel::server {

[[noreturn]] inline void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, "invalid_request_error", param);
}

// The field, or nullptr when it is missing or null.
inline const nlohmann::ordered_json* field(const nlohmann::ordered_json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

// Refuses, by name, every field of `body` in none of the `known` sets (the first one is `param`).
inline void refuse_unknown_fields(const nlohmann::ordered_json& body,
                                  std::initializer_list<const std::set<std::string>*> known) {
  std::vector<std::string> unknown;
  for (const auto& [key, value] : body.items()) {
    bool listed = false;
    for (const auto* set : known) listed = listed || set->count(key) > 0;
    if (!listed) unknown.push_back(key);
  }
  if (unknown.empty()) return;
  bad(unknown.front(), fmt::format("unrecognized request argument{}: {} (see docs/SERVER.md for what this server accepts)",
                                   unknown.size() > 1 ? "s" : "", fmt::join(unknown, ", ")));
}

inline bool boolean(const nlohmann::ordered_json& body, const char* name, bool fallback) {
  const nlohmann::ordered_json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) bad(name, fmt::format("'{}' must be true or false", name));
  return v->get<bool>();
}

}  // namespace kestrel::server
