// Error type used across Kestrel: every user-facing failure (bad file, bad argument, out of
// memory for the KV pool) is a kestrel::Error with a message that names the thing and the problem.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kestrel {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace kestrel
