// Compile-time checks jinja2 makes on a parsed template.
#include <fmt/format.h>

#include "chat/builtins.h"
#include "chat/parser_internal.h"
#include "chat/template_error.h"

namespace kestrel::chat {
namespace {

// `soft` is jinja2's soft frame: inside an if statement or a conditional expression, where an
// unknown filter or test is only an error if it is evaluated.
void check_expr(const Expr* e, bool soft) {
  if (!e) return;
  if (e->kind == Expr::Kind::CondExpr) soft = true;
  if (!soft && e->kind == Expr::Kind::Filter && !is_known_filter(e->name))
    throw ChatTemplateError(ChatTemplateError::Kind::Syntax, e->line, e->column,
                            fmt::format("No filter named '{}'.", e->name));
  if (!soft && e->kind == Expr::Kind::Test && !is_known_test(e->name))
    throw ChatTemplateError(ChatTemplateError::Kind::Syntax, e->line, e->column,
                            fmt::format("No test named '{}'.", e->name));
  check_expr(e->target.get(), soft);
  for (const auto& a : e->args) check_expr(a.get(), soft);
  for (const auto& kw : e->kwargs) check_expr(kw.value.get(), soft);
}

void check_body(const Body& body, bool soft);

void check_stmt(const Stmt& s, bool soft) {
  switch (s.kind) {
    case Stmt::Kind::If:
      for (const auto& e : s.exprs) check_expr(e.get(), true);
      for (const auto& b : s.bodies) check_body(b, true);
      return;
    case Stmt::Kind::For:
      check_expr(s.exprs[0].get(), soft);
      check_expr(s.exprs[1].get(), false);
      for (const auto& b : s.bodies) check_body(b, false);
      return;
    case Stmt::Kind::Print:
    case Stmt::Kind::Set:
      for (const auto& e : s.exprs) check_expr(e.get(), soft);
      return;
    case Stmt::Kind::CallBlock: check_expr(s.exprs[0].get(), soft); [[fallthrough]];
    case Stmt::Kind::Macro:
    case Stmt::Kind::With:
      for (const auto& d : s.defaults) check_expr(d.get(), s.kind == Stmt::Kind::With && soft);
      for (const auto& b : s.bodies) check_body(b, false);
      return;
    case Stmt::Kind::SetBlock:
    case Stmt::Kind::FilterBlock:
    case Stmt::Kind::Generation:
      for (const auto& e : s.exprs) check_expr(e.get(), false);
      for (const auto& b : s.bodies) check_body(b, false);
      return;
    default: return;
  }
}

void check_body(const Body& body, bool soft) {
  for (const auto& s : body) check_stmt(*s, soft);
}

}  // namespace

void check_filter_and_test_names(const Body& body) { check_body(body, false); }

}  // namespace kestrel::chat
