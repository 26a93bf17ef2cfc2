// Splits a template into tokens the way jinja2's lexer does with the settings transformers uses:
// trim_blocks and lstrip_blocks on, keep_trailing_newline off, `-`/`+` whitespace control.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel::chat {

enum class TokenType {
  Data,        // template text between tags (already whitespace-trimmed)
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,  // value holds the unescaped string
  Integer,
  Float,
  Operator,  // value holds the operator text: + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { } ;
  End,
};

struct Token {
  TokenType type;
  std::string value;
  int64_t integer = 0;
  double number = 0.0;
  int line = 1;
  int column = 1;

  bool is_name(std::string_view name) const { return type == TokenType::Name && value == name; }
  bool is_op(std::string_view op) const { return type == TokenType::Operator && value == op; }
};

// Throws ChatTemplateError (syntax) for unterminated tags, comments or strings and stray characters.
std::vector<Token> tokenize(std::string_view source);

// Describes a token for "unexpected ..." messages.
std::string describe_token(const Token& token);

}  // namespace kestrel::chat
