// Python-style function calls as Gemma writes them when asked to call tools (Google's function
// calling guide: a ```tool_code block of `name(arg=value, ...)` lines): each call's name and its
// arguments, keyword ones by name and positional ones in order. Values are Python literals
// (strings in either quote with escapes, numbers, True/False/None, lists, tuples, dicts),
// converted to JSON. Anything else (an expression, a variable, a nested call) is not a call.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kestrel::server {

struct PythonCall {
  std::string name;
  nlohmann::ordered_json positional = nlohmann::ordered_json::array();
  nlohmann::ordered_json keywords = nlohmann::ordered_json::object();
};

// The calls of `code` (one or more, separated by newlines or semicolons); nullopt when it is
// anything but calls.
std::optional<std::vector<PythonCall>> parse_python_calls(std::string_view code);

}  // namespace kestrel::server
