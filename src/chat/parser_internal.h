// Internals of the parser shared by its two halves: the token cursor and the expression parser
// (parser_expr.cpp); statements are parsed in parser.cpp.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "chat/ast.h"
#include "chat/lexer.h"

namespace kestrel::chat {

using Names = std::vector<std::string>;

inline bool contains(const Names& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

class TokenCursor {
 public:
  explicit TokenCursor(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  const Token& advance() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }

  [[noreturn]] void fail(const Token& at, const std::string& message) const;
  bool skip_op(std::string_view op);
  bool skip_name(std::string_view name);
  void expect_op(std::string_view op);
  const Token& expect_type(TokenType type, const char* what);
  std::string expect_name() { return expect_type(TokenType::Name, "name").value; }

  static ExprPtr make(Expr::Kind kind, const Token& at) {
    return std::make_unique<Expr>(kind, at.line, at.column);
  }

 private:
  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

// jinja2's expression grammar, from conditional expressions down to primaries and postfixes.
class ExpressionParser {
 public:
  explicit ExpressionParser(TokenCursor& cursor) : c_(cursor) {}

  // Comma-separated expressions: a Tuple node when there is a comma, else the single expression.
  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const Names& extra_end_rules,
                      bool explicit_parentheses);
  ExprPtr parse_expression(bool with_condexpr);
  // `| f(args) | g ...`; start_inline for filter blocks, whose first filter has no `|`.
  ExprPtr parse_filter(ExprPtr node, bool start_inline);

 private:
  TokenCursor& c_;
  int depth_ = 0;  // recursion depth, bounded so that hostile templates cannot exhaust the stack

  // Scoped recursion-depth counter.
  struct Nesting {
    ExpressionParser& parser;
    Nesting(ExpressionParser& p, const Token& at);
    ~Nesting() { --parser.depth_; }
  };

  bool is_tuple_end(const Names& extra_end_rules) const;
  ExprPtr binary(Expr::Kind kind, const Token& at, ExprPtr left, ExprPtr right, std::string op = "");
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  void parse_call_args(Expr& call);
  ExprPtr parse_call(ExprPtr node);
  ExprPtr parse_test(ExprPtr node);
};

// Unknown filters and tests are errors when the template is compiled, as in jinja2, unless they
// sit inside an if statement or a conditional expression (then they fail only when evaluated).
void check_filter_and_test_names(const Body& body);

}  // namespace kestrel::chat
