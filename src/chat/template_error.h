// The error a chat template raises, at parse time (syntax) or while rendering.
#pragma once

#include <string>

#include "core/error.h"

namespace kestrel::chat {

class ChatTemplateError : public Error {
 public:
  enum class Kind { Syntax, Runtime, Raised };

  // A syntax or runtime error; what() reads "chat template <kind> error at line L, column C: detail".
  ChatTemplateError(Kind kind, int line, int column, const std::string& detail);
  // The template called raise_exception(message): what() is exactly the message, as transformers
  // reports it (jinja2.exceptions.TemplateError(message)).
  static ChatTemplateError raised(const std::string& message, int line, int column);

  Kind kind() const { return kind_; }
  int line() const { return line_; }      // 1-based
  int column() const { return column_; }  // 1-based, in code points
  const std::string& detail() const { return detail_; }

 private:
  ChatTemplateError(const std::string& what, Kind kind, int line, int column, std::string detail)
      : Error(what), kind_(kind), line_(line), column_(column), detail_(std::move(detail)) {}

  Kind kind_;
  int line_;
  int column_;
  std::string detail_;
};

}  // namespace kestrel::chat
