// An error that becomes an OpenAI-format JSON error response with an HTTP status.
#pragma once

#include <stdexcept>
#include <string>

namespace kestrel::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string type = "invalid_request_error",
           std::string param = "", std::string code = "")
      : std::runtime_error(message),
        status_(status),
        type_(std::move(type)),
        param_(std::move(param)),
        code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string type_;
  std::string param_;
  std::string code_;
};

}  // namespace kestrel::server
