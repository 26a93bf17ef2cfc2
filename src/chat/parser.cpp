#include "chat/parser.h"

#include <fmt/format.h>

#include "chat/parser_internal.h"
#include "chat/template_error.h"

namespace kestrel::chat {
namespace {

// Statements: the template body, block tags and their nesting.
class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : c_(std::move(tokens)), expr_(c_) {}

  Body parse() { return subparse({}); }

 private:
  TokenCursor c_;
  ExpressionParser expr_;
  int loop_depth_ = 0;
  std::vector<std::string> open_tags_;

  StmtPtr make_stmt(Stmt::Kind kind, const Token& at) {
    return std::make_unique<Stmt>(kind, at.line, at.column);
  }

  [[noreturn]] void fail_eof(const Names& end_tokens) {
    std::string expected;
    for (size_t i = 0; i < end_tokens.size(); ++i) expected += (i ? " or '" : "'") + end_tokens[i] + "'";
    std::string message = "Unexpected end of template.";
    if (!end_tokens.empty()) message += " Jinja was looking for the following tags: " + expected + ".";
    if (!open_tags_.empty())
      message += " The innermost block that needs to be closed is '" + open_tags_.back() + "'.";
    c_.fail(c_.cur(), message);
  }

  // Statements until a block tag whose name is in end_tokens (left as the current token).
  Body subparse(const Names& end_tokens) {
    Body body;
    while (true) {
      const Token& t = c_.cur();
      switch (t.type) {
        case TokenType::Data: {
          auto s = make_stmt(Stmt::Kind::Data, t);
          s->text = t.value;
          body.push_back(std::move(s));
          c_.advance();
          break;
        }
        case TokenType::VarBegin: {
          auto s = make_stmt(Stmt::Kind::Print, t);
          c_.advance();
          s->exprs.push_back(expr_.parse_tuple(false, true, {}, false));
          c_.expect_type(TokenType::VarEnd, "end of print statement");
          body.push_back(std::move(s));
          break;
        }
        case TokenType::BlockBegin: {
          c_.advance();
          if (c_.cur().type == TokenType::Name && contains(end_tokens, c_.cur().value)) return body;
          body.push_back(parse_statement());
          c_.expect_type(TokenType::BlockEnd, "end of statement block");
          break;
        }
        case TokenType::End:
          if (!end_tokens.empty()) fail_eof(end_tokens);
          return body;
        default: c_.fail(t, fmt::format("unexpected '{}'", describe_token(t)));
      }
    }
  }

  Body parse_statements(const Names& end_tokens, bool drop_needle) {
    c_.skip_op(":");
    c_.expect_type(TokenType::BlockEnd, "end of statement block");
    Body body = subparse(end_tokens);
    if (c_.cur().type == TokenType::End) fail_eof(end_tokens);
    if (drop_needle) c_.advance();
    return body;
  }

  StmtPtr parse_statement() {
    const Token& t = c_.cur();
    if (t.type != TokenType::Name) c_.fail(t, "tag name expected");
    std::string tag = t.value;
    if (open_tags_.size() >= 200) c_.fail(t, "statements nested too deeply");
    open_tags_.push_back(tag);
    StmtPtr s;
    if (tag == "for")
      s = parse_for();
    else if (tag == "if")
      s = parse_if();
    else if (tag == "set")
      s = parse_set();
    else if (tag == "macro")
      s = parse_macro();
    else if (tag == "call")
      s = parse_call_block();
    else if (tag == "filter")
      s = parse_filter_block();
    else if (tag == "with")
      s = parse_with();
    else if (tag == "print")
      s = parse_print();
    else if (tag == "generation")
      s = parse_generation();
    else if (tag == "break" || tag == "continue")
      s = parse_loop_control(tag);
    else
      c_.fail(t, fmt::format("Encountered unknown tag '{}'.", tag));
    open_tags_.pop_back();
    return s;
  }

  StmtPtr parse_loop_control(const std::string& tag) {
    const Token& t = c_.advance();
    if (loop_depth_ == 0) c_.fail(t, fmt::format("'{}' outside of a loop", tag));
    return make_stmt(tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, t);
  }

  StmtPtr parse_for() {
    auto s = make_stmt(Stmt::Kind::For, c_.advance());
    s->target = parse_assign_target(false, {"in"});
    if (!c_.skip_name("in"))
      c_.fail(c_.cur(), fmt::format("expected 'in', got '{}'", describe_token(c_.cur())));
    s->exprs.push_back(expr_.parse_tuple(false, false, {"recursive"}, false));
    s->exprs.push_back(c_.skip_name("if") ? expr_.parse_expression(true) : nullptr);
    if (c_.cur().is_name("recursive")) c_.fail(c_.cur(), "recursive loops are not supported");
    ++loop_depth_;
    s->bodies.push_back(parse_statements({"endfor", "else"}, false));
    --loop_depth_;
    if (c_.advance().value == "endfor") {
      s->bodies.emplace_back();
    } else {
      s->bodies.push_back(parse_statements({"endfor"}, true));
    }
    return s;
  }

  StmtPtr parse_if() {
    auto s = make_stmt(Stmt::Kind::If, c_.advance());
    while (true) {
      s->exprs.push_back(expr_.parse_tuple(false, false, {}, false));
      s->bodies.push_back(parse_statements({"elif", "else", "endif"}, false));
      const Token& t = c_.advance();
      if (t.value == "elif") continue;
      if (t.value == "else") s->bodies.push_back(parse_statements({"endif"}, true));
      break;
    }
    return s;
  }

  StmtPtr parse_set() {
    const Token& at = c_.advance();
    Target target = parse_assign_target(true, {});
    if (c_.skip_op("=")) {
      auto s = make_stmt(Stmt::Kind::Set, at);
      s->target = std::move(target);
      s->exprs.push_back(expr_.parse_tuple(false, true, {}, false));
      return s;
    }
    auto s = make_stmt(Stmt::Kind::SetBlock, at);
    s->target = std::move(target);
    s->exprs.push_back(expr_.parse_filter(nullptr, false));
    s->bodies.push_back(parse_statements({"endset"}, true));
    return s;
  }

  void parse_signature(Stmt& s) {
    c_.expect_op("(");
    while (!c_.cur().is_op(")")) {
      if (!s.params.empty()) c_.expect_op(",");
      s.params.push_back(c_.expect_name());
      if (c_.skip_op("=")) {
        s.defaults.push_back(expr_.parse_expression(true));
      } else {
        bool has_defaults =
            std::any_of(s.defaults.begin(), s.defaults.end(), [](const ExprPtr& e) { return e != nullptr; });
        if (has_defaults) c_.fail(c_.cur(), "non-default argument follows default argument");
        s.defaults.push_back(nullptr);
      }
    }
    c_.expect_op(")");
  }

  StmtPtr parse_macro() {
    auto s = make_stmt(Stmt::Kind::Macro, c_.advance());
    s->name = c_.expect_name();
    parse_signature(*s);
    int saved_depth = loop_depth_;
    loop_depth_ = 0;
    s->bodies.push_back(parse_statements({"endmacro"}, true));
    loop_depth_ = saved_depth;
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = make_stmt(Stmt::Kind::CallBlock, c_.advance());
    if (c_.cur().is_op("(")) parse_signature(*s);
    const Token& at = c_.cur();
    ExprPtr call = expr_.parse_expression(true);
    if (call->kind != Expr::Kind::Call) c_.fail(at, "expected call");
    s->exprs.push_back(std::move(call));
    int saved_depth = loop_depth_;
    loop_depth_ = 0;
    s->bodies.push_back(parse_statements({"endcall"}, true));
    loop_depth_ = saved_depth;
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = make_stmt(Stmt::Kind::FilterBlock, c_.advance());
    s->exprs.push_back(expr_.parse_filter(nullptr, true));
    s->bodies.push_back(parse_statements({"endfilter"}, true));
    return s;
  }

  StmtPtr parse_with() {
    auto s = make_stmt(Stmt::Kind::With, c_.advance());
    while (c_.cur().type != TokenType::BlockEnd) {
      if (!s->params.empty()) c_.expect_op(",");
      s->params.push_back(c_.expect_name());
      c_.expect_op("=");
      s->defaults.push_back(expr_.parse_expression(true));
    }
    s->bodies.push_back(parse_statements({"endwith"}, true));
    return s;
  }

  StmtPtr parse_print() {
    auto s = make_stmt(Stmt::Kind::Print, c_.advance());
    while (c_.cur().type != TokenType::BlockEnd) {
      if (!s->exprs.empty()) c_.expect_op(",");
      s->exprs.push_back(expr_.parse_expression(true));
    }
    return s;
  }

  StmtPtr parse_generation() {
    auto s = make_stmt(Stmt::Kind::Generation, c_.advance());
    s->bodies.push_back(parse_statements({"endgeneration"}, true));
    return s;
  }

  // Assignment targets: `name`, `a, b`, `(a, b)` or (for set) `ns.attr`.
  Target parse_assign_target(bool with_namespace, const Names& extra_end_rules) {
    Target target;
    bool parenthesized = c_.skip_op("(");
    while (true) {
      const Token& t = c_.cur();
      std::string name = c_.expect_name();
      if (name == "true" || name == "false" || name == "none" || name == "True" || name == "False" ||
          name == "None")
        c_.fail(t, "can't assign to 'const'");
      if (with_namespace && target.names.empty() && c_.cur().is_op(".")) {
        c_.advance();
        target.names.push_back(name);
        target.attribute = c_.expect_name();
        return target;
      }
      target.names.push_back(name);
      if (!c_.cur().is_op(",")) break;
      c_.advance();
      target.is_tuple = true;
      if (c_.cur().is_op(")") ||
          (c_.cur().type == TokenType::Name && contains(extra_end_rules, c_.cur().value)))
        break;
    }
    if (parenthesized) {
      c_.expect_op(")");
      target.is_tuple = true;
    }
    return target;
  }
};

}  // namespace

Body parse_template(std::string_view source) {
  Body body = Parser(tokenize(source)).parse();
  check_filter_and_test_names(body);
  return body;
}

}  // namespace kestrel::chat
