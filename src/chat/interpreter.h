// Renders a parsed template: runs statements, evaluates expressions with jinja2's semantics and
// keeps the variable scopes (template, for-loop iteration, macro call).
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "chat/ast.h"
#include "chat/value.h"

namespace kestrel::chat {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  // `context` holds the render variables (messages, tools, ...); `now` is what strftime_now()
  // formats (local time of the call when absent).
  Interpreter(const Body& program, std::unordered_map<std::string, Value> context,
              std::optional<std::tm> now);

  std::string render();

  // Calls a callable value (builtin, macro, bound method); fails for anything else.
  Value call(const Value& callee, CallArgs& args);
  // Filters and tests by name, as `value | name(args)` and `value is name(args)`.
  Value filter(const std::string& name, const Value& input, CallArgs& args);
  bool test(const std::string& name, const Value& input, CallArgs& args);
  const std::optional<std::tm>& now() const { return now_; }

 private:
  enum class Flow { Normal, Break, Continue };

  const Body& program_;
  std::unordered_map<std::string, Value> context_;
  std::unordered_map<std::string, Value> globals_;
  std::optional<std::tm> now_;
  int call_depth_ = 0;

  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out);
  Flow exec(const Stmt& stmt, const ScopePtr& scope, std::string& out);
  void exec_for(const Stmt& stmt, const ScopePtr& scope, std::string& out);
  void exec_set(const Stmt& stmt, const ScopePtr& scope, const Value& value);
  Value make_macro(const Stmt& stmt, const ScopePtr& scope);
  Value make_caller(const Stmt& stmt, const ScopePtr& scope);
  Value invoke_macro(const Stmt& stmt, const ScopePtr& defining_scope, CallArgs& args);

  Value eval(const Expr& expr, const ScopePtr& scope);
  Value eval_inner(const Expr& expr, const ScopePtr& scope);
  Value eval_compare(const Expr& expr, const ScopePtr& scope);
  Value eval_filter(const Expr& expr, const ScopePtr& scope, const Value* input);
  CallArgs eval_args(const Expr& expr, const ScopePtr& scope);
  Value lookup(const std::string& name, const ScopePtr& scope) const;
  void bind_target(const Target& target, const Value& value, Scope& scope);
};

}  // namespace kestrel::chat
