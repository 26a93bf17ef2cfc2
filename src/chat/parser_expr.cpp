// The expression half of the parser: jinja2's precedence climbing from conditional expressions
// (`a if b else c`) through or/and/not, comparisons, + -, ~, * / // %, **, unary signs, down to
// primaries with their postfixes (attributes, subscripts, calls), filters and tests.
#include <fmt/format.h>

#include "chat/parser_internal.h"
#include "chat/template_error.h"

namespace kestrel::chat {

ExpressionParser::Nesting::Nesting(ExpressionParser& p, const Token& at) : parser(p) {
  if (++parser.depth_ > 200) {
    --parser.depth_;
    parser.c_.fail(at, "expression nested too deeply");
  }
}

void TokenCursor::fail(const Token& at, const std::string& message) const {
  throw ChatTemplateError(ChatTemplateError::Kind::Syntax, at.line, at.column, message);
}

bool TokenCursor::skip_op(std::string_view op) {
  if (!cur().is_op(op)) return false;
  advance();
  return true;
}

bool TokenCursor::skip_name(std::string_view name) {
  if (!cur().is_name(name)) return false;
  advance();
  return true;
}

void TokenCursor::expect_op(std::string_view op) {
  if (!skip_op(op)) fail(cur(), fmt::format("expected token '{}', got '{}'", op, describe_token(cur())));
}

const Token& TokenCursor::expect_type(TokenType type, const char* what) {
  if (cur().type != type) fail(cur(), fmt::format("expected {}, got '{}'", what, describe_token(cur())));
  return advance();
}

bool ExpressionParser::is_tuple_end(const Names& extra_end_rules) const {
  const Token& t = c_.cur();
  if (t.type == TokenType::VarEnd || t.type == TokenType::BlockEnd || t.is_op(")")) return true;
  return t.type == TokenType::Name && contains(extra_end_rules, t.value);
}

ExprPtr ExpressionParser::parse_tuple(bool simplified, bool with_condexpr, const Names& extra_end_rules,
                                      bool explicit_parentheses) {
  const Token& at = c_.cur();
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) c_.expect_op(",");
    if (is_tuple_end(extra_end_rules)) break;
    items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
    if (c_.cur().is_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parentheses)
      c_.fail(c_.cur(), fmt::format("Expected an expression, got '{}'", describe_token(c_.cur())));
  }
  auto e = TokenCursor::make(Expr::Kind::Tuple, at);
  e->args = std::move(items);
  return e;
}

ExprPtr ExpressionParser::parse_expression(bool with_condexpr) {
  if (!with_condexpr) return parse_or();
  const Token& at = c_.cur();
  ExprPtr expr = parse_or();
  while (c_.skip_name("if")) {
    auto cond = TokenCursor::make(Expr::Kind::CondExpr, at);
    cond->args.push_back(parse_or());
    cond->args.push_back(std::move(expr));
    if (c_.skip_name("else")) {
      Nesting nesting(*this, c_.cur());
      cond->args.push_back(parse_expression(true));
    } else {
      cond->args.push_back(nullptr);
    }
    expr = std::move(cond);
  }
  return expr;
}

ExprPtr ExpressionParser::binary(Expr::Kind kind, const Token& at, ExprPtr left, ExprPtr right,
                                 std::string op) {
  auto e = TokenCursor::make(kind, at);
  e->name = std::move(op);
  e->args.push_back(std::move(left));
  e->args.push_back(std::move(right));
  return e;
}

ExprPtr ExpressionParser::parse_or() {
  ExprPtr left = parse_and();
  while (c_.cur().is_name("or")) {
    const Token& at = c_.advance();
    left = binary(Expr::Kind::Or, at, std::move(left), parse_and());
  }
  return left;
}

ExprPtr ExpressionParser::parse_and() {
  ExprPtr left = parse_not();
  while (c_.cur().is_name("and")) {
    const Token& at = c_.advance();
    left = binary(Expr::Kind::And, at, std::move(left), parse_not());
  }
  return left;
}

ExprPtr ExpressionParser::parse_not() {
  if (c_.cur().is_name("not")) {
    Nesting nesting(*this, c_.cur());
    auto e = TokenCursor::make(Expr::Kind::Not, c_.advance());
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr ExpressionParser::parse_compare() {
  const Token& at = c_.cur();
  ExprPtr first = parse_math1();
  std::vector<std::string> ops;
  std::vector<ExprPtr> operands;
  static const Names compare_ops = {"==", "!=", "<", "<=", ">", ">="};
  while (true) {
    if (c_.cur().type == TokenType::Operator && contains(compare_ops, c_.cur().value)) {
      ops.push_back(c_.advance().value);
    } else if (c_.cur().is_name("in")) {
      c_.advance();
      ops.push_back("in");
    } else if (c_.cur().is_name("not") && c_.peek().is_name("in")) {
      c_.advance();
      c_.advance();
      ops.push_back("notin");
    } else {
      break;
    }
    operands.push_back(parse_math1());
  }
  if (ops.empty()) return first;
  auto e = TokenCursor::make(Expr::Kind::Compare, at);
  e->args.push_back(std::move(first));
  for (auto& operand : operands) e->args.push_back(std::move(operand));
  e->ops = std::move(ops);
  return e;
}

ExprPtr ExpressionParser::parse_math1() {
  ExprPtr left = parse_concat();
  while (c_.cur().is_op("+") || c_.cur().is_op("-")) {
    const Token& at = c_.advance();
    left = binary(Expr::Kind::Binary, at, std::move(left), parse_concat(), at.value);
  }
  return left;
}

ExprPtr ExpressionParser::parse_concat() {
  const Token& at = c_.cur();
  ExprPtr first = parse_math2();
  if (!c_.cur().is_op("~")) return first;
  auto e = TokenCursor::make(Expr::Kind::Concat, at);
  e->args.push_back(std::move(first));
  while (c_.skip_op("~")) e->args.push_back(parse_math2());
  return e;
}

ExprPtr ExpressionParser::parse_math2() {
  ExprPtr left = parse_pow();
  while (c_.cur().is_op("*") || c_.cur().is_op("/") || c_.cur().is_op("//") || c_.cur().is_op("%")) {
    const Token& at = c_.advance();
    left = binary(Expr::Kind::Binary, at, std::move(left), parse_pow(), at.value);
  }
  return left;
}

ExprPtr ExpressionParser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (c_.cur().is_op("**")) {
    const Token& at = c_.advance();
    left = binary(Expr::Kind::Binary, at, std::move(left), parse_unary(true), "**");
  }
  return left;
}

ExprPtr ExpressionParser::parse_unary(bool with_filter) {
  ExprPtr node;
  if (c_.cur().is_op("-") || c_.cur().is_op("+")) {
    Nesting nesting(*this, c_.cur());
    const Token& at = c_.advance();
    node = TokenCursor::make(at.value == "-" ? Expr::Kind::Neg : Expr::Kind::Pos, at);
    node->args.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr ExpressionParser::parse_primary() {
  const Token& t = c_.cur();
  Nesting nesting(*this, t);
  switch (t.type) {
    case TokenType::Name: {
      c_.advance();
      if (t.value == "true" || t.value == "True" || t.value == "false" || t.value == "False") {
        auto e = TokenCursor::make(Expr::Kind::Const, t);
        e->constant = Value(t.value == "true" || t.value == "True");
        return e;
      }
      if (t.value == "none" || t.value == "None") {
        auto e = TokenCursor::make(Expr::Kind::Const, t);
        e->constant = Value::none();
        return e;
      }
      auto e = TokenCursor::make(Expr::Kind::Name, t);
      e->name = t.value;
      return e;
    }
    case TokenType::String: {
      auto e = TokenCursor::make(Expr::Kind::Const, t);
      std::string text;
      while (c_.cur().type == TokenType::String) text += c_.advance().value;
      e->constant = Value(std::move(text));
      return e;
    }
    case TokenType::Integer:
    case TokenType::Float: {
      auto e = TokenCursor::make(Expr::Kind::Const, t);
      e->constant = t.type == TokenType::Integer ? Value(t.integer) : Value(t.number);
      c_.advance();
      return e;
    }
    case TokenType::Operator:
      if (t.value == "(") {
        c_.advance();
        ExprPtr e = parse_tuple(false, true, {}, true);
        c_.expect_op(")");
        return e;
      }
      if (t.value == "[") return parse_list();
      if (t.value == "{") return parse_dict();
      [[fallthrough]];
    default: c_.fail(t, fmt::format("unexpected '{}'", describe_token(t)));
  }
}

ExprPtr ExpressionParser::parse_list() {
  auto e = TokenCursor::make(Expr::Kind::List, c_.advance());
  while (!c_.cur().is_op("]")) {
    if (!e->args.empty()) c_.expect_op(",");
    if (c_.cur().is_op("]")) break;
    e->args.push_back(parse_expression(true));
  }
  c_.expect_op("]");
  return e;
}

ExprPtr ExpressionParser::parse_dict() {
  auto e = TokenCursor::make(Expr::Kind::Dict, c_.advance());
  while (!c_.cur().is_op("}")) {
    if (!e->args.empty()) c_.expect_op(",");
    if (c_.cur().is_op("}")) break;
    e->args.push_back(parse_expression(true));
    c_.expect_op(":");
    e->args.push_back(parse_expression(true));
  }
  c_.expect_op("}");
  return e;
}

ExprPtr ExpressionParser::parse_postfix(ExprPtr node) {
  while (true) {
    if (c_.cur().is_op(".") || c_.cur().is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (c_.cur().is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr ExpressionParser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (c_.cur().is_op("|")) {
      node = parse_filter(std::move(node), false);
    } else if (c_.cur().is_name("is")) {
      node = parse_test(std::move(node));
    } else if (c_.cur().is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr ExpressionParser::parse_subscript(ExprPtr node) {
  const Token& t = c_.advance();
  if (t.value == ".") {
    const Token& attr = c_.advance();
    if (attr.type == TokenType::Name) {
      auto e = TokenCursor::make(Expr::Kind::Getattr, t);
      e->target = std::move(node);
      e->name = attr.value;
      return e;
    }
    if (attr.type != TokenType::Integer) c_.fail(attr, "expected name or number");
    auto e = TokenCursor::make(Expr::Kind::Getitem, t);
    e->target = std::move(node);
    auto index = TokenCursor::make(Expr::Kind::Const, attr);
    index->constant = Value(attr.integer);
    e->args.push_back(std::move(index));
    return e;
  }
  std::vector<ExprPtr> args;
  while (!c_.cur().is_op("]")) {
    if (!args.empty()) c_.expect_op(",");
    args.push_back(parse_subscribed());
  }
  c_.expect_op("]");
  auto e = TokenCursor::make(Expr::Kind::Getitem, t);
  e->target = std::move(node);
  if (args.size() == 1) {
    e->args.push_back(std::move(args[0]));
  } else {
    auto tuple = TokenCursor::make(Expr::Kind::Tuple, t);
    tuple->args = std::move(args);
    e->args.push_back(std::move(tuple));
  }
  return e;
}

ExprPtr ExpressionParser::parse_subscribed() {
  const Token& at = c_.cur();
  std::vector<ExprPtr> parts;
  if (c_.cur().is_op(":")) {
    c_.advance();
    parts.push_back(nullptr);
  } else {
    ExprPtr node = parse_expression(true);
    if (!c_.cur().is_op(":")) return node;
    c_.advance();
    parts.push_back(std::move(node));
  }
  if (c_.cur().is_op(":") || c_.cur().is_op("]") || c_.cur().is_op(",")) {
    parts.push_back(nullptr);
  } else {
    parts.push_back(parse_expression(true));
  }
  if (c_.skip_op(":")) {
    parts.push_back((c_.cur().is_op("]") || c_.cur().is_op(",")) ? nullptr : parse_expression(true));
  } else {
    parts.push_back(nullptr);
  }
  auto e = TokenCursor::make(Expr::Kind::Slice, at);
  e->args = std::move(parts);
  return e;
}

void ExpressionParser::parse_call_args(Expr& call) {
  const Token& open = c_.cur();
  c_.expect_op("(");
  bool require_comma = false;
  while (!c_.cur().is_op(")")) {
    if (require_comma) {
      c_.expect_op(",");
      if (c_.cur().is_op(")")) break;
    }
    if (c_.cur().is_op("*") || c_.cur().is_op("**"))
      c_.fail(c_.cur(), "*args and **kwargs in calls are not supported");
    if (c_.cur().type == TokenType::Name && c_.peek().is_op("=")) {
      std::string key = c_.advance().value;
      c_.advance();
      call.kwargs.push_back(Keyword{key, parse_expression(true)});
    } else {
      if (!call.kwargs.empty()) c_.fail(open, "invalid syntax for function call expression");
      call.args.push_back(parse_expression(true));
    }
    require_comma = true;
  }
  c_.expect_op(")");
}

ExprPtr ExpressionParser::parse_call(ExprPtr node) {
  auto e = TokenCursor::make(Expr::Kind::Call, c_.cur());
  e->target = std::move(node);
  parse_call_args(*e);
  return e;
}

ExprPtr ExpressionParser::parse_filter(ExprPtr node, bool start_inline) {
  while (c_.cur().is_op("|") || start_inline) {
    if (!start_inline) c_.advance();
    const Token& at = c_.cur();
    std::string name = c_.expect_name();
    while (c_.skip_op(".")) name += "." + c_.expect_name();
    auto e = TokenCursor::make(Expr::Kind::Filter, at);
    e->name = std::move(name);
    e->target = std::move(node);
    if (c_.cur().is_op("(")) parse_call_args(*e);
    node = std::move(e);
    start_inline = false;
  }
  return node;
}

ExprPtr ExpressionParser::parse_test(ExprPtr node) {
  const Token& at = c_.advance();
  bool negated = c_.skip_name("not");
  std::string name = c_.expect_name();
  while (c_.skip_op(".")) name += "." + c_.expect_name();
  auto e = TokenCursor::make(Expr::Kind::Test, at);
  e->name = std::move(name);
  e->target = std::move(node);
  const Token& t = c_.cur();
  bool starts_arg = t.type == TokenType::Name || t.type == TokenType::String ||
                    t.type == TokenType::Integer || t.type == TokenType::Float || t.is_op("(") ||
                    t.is_op("[") || t.is_op("{");
  if (t.is_op("(")) {
    parse_call_args(*e);
  } else if (starts_arg && !t.is_name("else") && !t.is_name("or") && !t.is_name("and")) {
    if (t.is_name("is")) c_.fail(t, "You cannot chain multiple tests with is");
    e->args.push_back(parse_postfix(parse_primary()));
  }
  if (!negated) return e;
  auto n = TokenCursor::make(Expr::Kind::Not, at);
  n->args.push_back(std::move(e));
  return n;
}

}  // namespace kestrel::chat
