#include "chat/interpreter.h"

#include <fmt/format.h>

#include "chat/builtins.h"
#include "chat/template_error.h"

namespace kestrel::chat {
namespace {

constexpr int kMaxCallDepth = 200;

[[noreturn]] void rethrow_at(const ScriptError& e, int line, int column) {
  throw ChatTemplateError(ChatTemplateError::Kind::Runtime, line, column, e.what());
}

}  // namespace

Interpreter::Interpreter(const Body& program, std::unordered_map<std::string, Value> context,
                         std::optional<std::tm> now)
    : program_(program), context_(std::move(context)), now_(now) {
  install_globals(globals_);
}

std::string Interpreter::render() {
  std::string out;
  auto scope = std::make_shared<Scope>();
  exec_body(program_, scope, out);
  return out;
}

Value Interpreter::lookup(const std::string& name, const ScopePtr& scope) const {
  for (const Scope* s = scope.get(); s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  if (auto it = context_.find(name); it != context_.end()) return it->second;
  if (auto it = globals_.find(name); it != globals_.end()) return it->second;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

Interpreter::Flow Interpreter::exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const auto& stmt : body) {
    Flow flow = exec(*stmt, scope, out);
    if (flow != Flow::Normal) return flow;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& stmt, const ScopePtr& scope, std::string& out) {
  switch (stmt.kind) {
    case Stmt::Kind::Data: out += stmt.text; break;
    case Stmt::Kind::Print:
      for (const auto& e : stmt.exprs) out += to_str(eval(*e, scope));
      break;
    case Stmt::Kind::If:
      for (size_t i = 0; i < stmt.bodies.size(); ++i) {
        if (i >= stmt.exprs.size() || truthy(eval(*stmt.exprs[i], scope)))
          return exec_body(stmt.bodies[i], scope, out);
      }
      break;
    case Stmt::Kind::For: exec_for(stmt, scope, out); break;
    case Stmt::Kind::Set: exec_set(stmt, scope, eval(*stmt.exprs[0], scope)); break;
    case Stmt::Kind::SetBlock: {
      std::string text;
      exec_body(stmt.bodies[0], scope, text);
      Value value(std::move(text));
      if (stmt.exprs[0]) value = eval_filter(*stmt.exprs[0], scope, &value);
      exec_set(stmt, scope, value);
      break;
    }
    case Stmt::Kind::Macro: scope->vars[stmt.name] = make_macro(stmt, scope); break;
    case Stmt::Kind::CallBlock: {
      const Expr& call = *stmt.exprs[0];
      try {
        Value callee = eval(*call.target, scope);
        CallArgs args = eval_args(call, scope);
        args.keyword.emplace_back("caller", make_caller(stmt, scope));
        out += to_str(this->call(callee, args));
      } catch (const ScriptError& e) {
        rethrow_at(e, call.line, call.column);
      } catch (const TemplateRaise& e) {
        throw ChatTemplateError::raised(e.what(), call.line, call.column);
      }
      break;
    }
    case Stmt::Kind::FilterBlock: {
      std::string text;
      exec_body(stmt.bodies[0], scope, text);
      Value value(std::move(text));
      out += to_str(eval_filter(*stmt.exprs[0], scope, &value));
      break;
    }
    case Stmt::Kind::With: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      for (size_t i = 0; i < stmt.params.size(); ++i)
        inner->vars[stmt.params[i]] = eval(*stmt.defaults[i], scope);
      return exec_body(stmt.bodies[0], inner, out);
    }
    case Stmt::Kind::Generation: return exec_body(stmt.bodies[0], scope, out);
    case Stmt::Kind::Break: return Flow::Break;
    case Stmt::Kind::Continue: return Flow::Continue;
  }
  return Flow::Normal;
}

void Interpreter::bind_target(const Target& target, const Value& value, Scope& scope) {
  if (!target.is_tuple) {
    scope.vars[target.names[0]] = value;
    return;
  }
  if (value.is_undefined()) value.fail_undefined();
  ValueList items = iterate(value);
  if (items.size() > target.names.size())
    script_error(fmt::format("too many values to unpack (expected {})", target.names.size()));
  if (items.size() < target.names.size())
    script_error(
        fmt::format("not enough values to unpack (expected {}, got {})", target.names.size(), items.size()));
  for (size_t i = 0; i < items.size(); ++i) scope.vars[target.names[i]] = items[i];
}

void Interpreter::exec_set(const Stmt& stmt, const ScopePtr& scope, const Value& value) {
  try {
    if (stmt.target.attribute.empty()) {
      bind_target(stmt.target, value, *scope);
      return;
    }
    Value ns = lookup(stmt.target.names[0], scope);
    if (!ns.is_namespace()) script_error("cannot assign attribute on non-namespace object");
    if (!stmt.target.attribute.empty() && stmt.target.attribute[0] == '_')
      script_error(fmt::format(
          "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '{}'. "
          "Please rename the attribute.",
          stmt.target.attribute));
    ns.dict_data().set(Value(stmt.target.attribute), value);
  } catch (const ScriptError& e) {
    rethrow_at(e, stmt.line, stmt.column);
  }
}

void Interpreter::exec_for(const Stmt& stmt, const ScopePtr& scope, std::string& out) {
  ValueList items;
  const Expr& iter_expr = *stmt.exprs[0];
  Value iterable = eval(iter_expr, scope);
  try {
    items = iterate(iterable);
    if (stmt.exprs[1]) {
      ValueList kept;
      for (const Value& item : items) {
        auto probe = std::make_shared<Scope>();
        probe->parent = scope;
        bind_target(stmt.target, item, *probe);
        if (truthy(eval(*stmt.exprs[1], probe))) kept.push_back(item);
      }
      items = std::move(kept);
    }
  } catch (const ScriptError& e) {
    rethrow_at(e, iter_expr.line, iter_expr.column);
  }
  auto shared_items = std::make_shared<const ValueList>(std::move(items));
  for (size_t i = 0; i < shared_items->size(); ++i) {
    auto iteration = std::make_shared<Scope>();
    iteration->parent = scope;
    try {
      bind_target(stmt.target, (*shared_items)[i], *iteration);
    } catch (const ScriptError& e) {
      rethrow_at(e, stmt.line, stmt.column);
    }
    auto loop = std::make_shared<LoopData>();
    loop->items = shared_items;
    loop->index0 = i;
    iteration->vars["loop"] = Value::loop(std::move(loop));
    if (exec_body(stmt.bodies[0], iteration, out) == Flow::Break) break;
  }
  if (shared_items->empty()) {
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    exec_body(stmt.bodies[1], inner, out);
  }
}

// Macros and callers hold their defining scope weakly: the scope usually stores the macro itself,
// and a strong reference would make a cycle that outlives the render.
Value Interpreter::make_macro(const Stmt& stmt, const ScopePtr& scope) {
  const Stmt* def = &stmt;
  std::weak_ptr<Scope> weak = scope;
  return Value::callable(stmt.name, [def, weak](Interpreter& interp, CallArgs& args) {
    ScopePtr defining = weak.lock();
    if (!defining) script_error(fmt::format("macro '{}' called after its scope ended", def->name));
    return interp.invoke_macro(*def, defining, args);
  });
}

Value Interpreter::make_caller(const Stmt& stmt, const ScopePtr& scope) {
  const Stmt* def = &stmt;
  std::weak_ptr<Scope> weak = scope;
  return Value::callable("caller", [def, weak](Interpreter& interp, CallArgs& args) {
    ScopePtr defining = weak.lock();
    if (!defining) script_error("caller() called after its scope ended");
    return interp.invoke_macro(*def, defining, args);
  });
}

Value Interpreter::invoke_macro(const Stmt& def, const ScopePtr& defining_scope, CallArgs& args) {
  if (call_depth_ >= kMaxCallDepth) script_error("maximum macro recursion depth exceeded");
  auto scope = std::make_shared<Scope>();
  scope->parent = defining_scope;
  ValueList varargs;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < def.params.size()) {
      scope->vars[def.params[i]] = args.positional[i];
    } else {
      varargs.push_back(args.positional[i]);
    }
  }
  Value kwargs = Value::dict();
  for (auto& [key, value] : args.keyword) {
    bool is_param = false;
    for (size_t i = 0; i < def.params.size(); ++i) {
      if (def.params[i] != key) continue;
      if (i < args.positional.size())
        script_error(fmt::format("macro '{}' got multiple values for argument '{}'", def.name, key));
      is_param = true;
    }
    if (is_param || (key == "caller" && def.kind == Stmt::Kind::Macro)) {
      scope->vars[key] = value;
    } else {
      kwargs.dict_data().set(Value(key), value);
    }
  }
  for (size_t i = 0; i < def.params.size(); ++i) {
    if (scope->vars.count(def.params[i])) continue;
    if (def.defaults[i]) {
      scope->vars[def.params[i]] = eval(*def.defaults[i], scope);
    } else {
      scope->vars[def.params[i]] =
          Value::undefined(fmt::format("parameter '{}' was not provided", def.params[i]));
    }
  }
  scope->vars["varargs"] = Value::tuple(std::move(varargs));
  scope->vars["kwargs"] = kwargs;
  std::string out;
  ++call_depth_;
  try {
    exec_body(def.bodies[0], scope, out);
  } catch (...) {
    --call_depth_;
    throw;
  }
  --call_depth_;
  return Value(std::move(out));
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_callable()) return callee.callable_data().function(*this, args);
  if (callee.is_undefined()) callee.fail_undefined();
  script_error(fmt::format("'{}' object is not callable", python_type_name(callee)));
}

Value Interpreter::filter(const std::string& name, const Value& input, CallArgs& args) {
  Value result;
  if (call_filter(*this, name, input, args, result)) return result;
  if (call_sequence_filter(*this, name, input, args, result)) return result;
  script_error(fmt::format("No filter named '{}' found.", name));
}

bool Interpreter::test(const std::string& name, const Value& input, CallArgs& args) {
  bool result = false;
  if (call_test(*this, name, input, args, result)) return result;
  script_error(fmt::format("No test named '{}' found.", name));
}

CallArgs Interpreter::eval_args(const Expr& expr, const ScopePtr& scope) {
  CallArgs args;
  for (const auto& a : expr.args) args.positional.push_back(eval(*a, scope));
  for (const auto& kw : expr.kwargs) args.keyword.emplace_back(kw.name, eval(*kw.value, scope));
  return args;
}

Value Interpreter::eval_filter(const Expr& expr, const ScopePtr& scope, const Value* input) {
  // In filter blocks (`input` given) the chain ends in a null target that stands for the block text.
  Value operand = !expr.target ? *input
                  : input      ? eval_filter(*expr.target, scope, input)
                               : eval(*expr.target, scope);
  try {
    CallArgs args = eval_args(expr, scope);
    return filter(expr.name, operand, args);
  } catch (const ScriptError& e) {
    rethrow_at(e, expr.line, expr.column);
  }
}

Value Interpreter::eval(const Expr& expr, const ScopePtr& scope) {
  try {
    return eval_inner(expr, scope);
  } catch (const ScriptError& e) {
    rethrow_at(e, expr.line, expr.column);
  } catch (const TemplateRaise& e) {
    throw ChatTemplateError::raised(e.what(), expr.line, expr.column);
  }
}

Value Interpreter::eval_compare(const Expr& expr, const ScopePtr& scope) {
  Value left = eval(*expr.args[0], scope);
  for (size_t i = 0; i < expr.ops.size(); ++i) {
    Value right = eval(*expr.args[i + 1], scope);
    if (!compare_op(expr.ops[i], left, right)) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Interpreter::eval_inner(const Expr& expr, const ScopePtr& scope) {
  switch (expr.kind) {
    case Expr::Kind::Const: return expr.constant;
    case Expr::Kind::Name: return lookup(expr.name, scope);
    case Expr::Kind::List:
    case Expr::Kind::Tuple: {
      ValueList items;
      for (const auto& a : expr.args) items.push_back(eval(*a, scope));
      return expr.kind == Expr::Kind::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case Expr::Kind::Dict: {
      Value d = Value::dict();
      for (size_t i = 0; i + 1 < expr.args.size(); i += 2) {
        Value key = eval(*expr.args[i], scope);
        if (key.is_list() || key.is_dict() || key.is_namespace())
          script_error(fmt::format("unhashable type: '{}'", python_type_name(key)));
        d.dict_data().set(key, eval(*expr.args[i + 1], scope));
      }
      return d;
    }
    case Expr::Kind::Getattr: return get_attribute(eval(*expr.target, scope), expr.name);
    case Expr::Kind::Getitem: {
      Value obj = eval(*expr.target, scope);
      const Expr& index = *expr.args[0];
      if (index.kind == Expr::Kind::Slice) {
        auto part = [&](size_t i) { return index.args[i] ? eval(*index.args[i], scope) : Value::none(); };
        if (obj.is_undefined()) obj.fail_undefined();
        return slice_value(obj, part(0), part(1), part(2));
      }
      return get_item(obj, eval(index, scope));
    }
    case Expr::Kind::Slice: script_error("slice outside of a subscript");
    case Expr::Kind::Call: {
      Value callee = eval(*expr.target, scope);
      CallArgs args = eval_args(expr, scope);
      return call(callee, args);
    }
    case Expr::Kind::Filter: return eval_filter(expr, scope, nullptr);
    case Expr::Kind::Test: {
      Value operand = eval(*expr.target, scope);
      CallArgs args = eval_args(expr, scope);
      return Value(test(expr.name, operand, args));
    }
    case Expr::Kind::Not: return Value(!truthy(eval(*expr.args[0], scope)));
    case Expr::Kind::Neg:
    case Expr::Kind::Pos: return unary_minus(eval(*expr.args[0], scope), expr.kind == Expr::Kind::Neg);
    case Expr::Kind::Binary: {
      Value a = eval(*expr.args[0], scope);
      Value b = eval(*expr.args[1], scope);
      return binary_op(expr.name, a, b);
    }
    case Expr::Kind::And: {
      Value a = eval(*expr.args[0], scope);
      return truthy(a) ? eval(*expr.args[1], scope) : a;
    }
    case Expr::Kind::Or: {
      Value a = eval(*expr.args[0], scope);
      return truthy(a) ? a : eval(*expr.args[1], scope);
    }
    case Expr::Kind::Compare: return eval_compare(expr, scope);
    case Expr::Kind::Concat: {
      std::string s;
      for (const auto& a : expr.args) s += to_str(eval(*a, scope));
      return Value(std::move(s));
    }
    case Expr::Kind::CondExpr:
      if (truthy(eval(*expr.args[0], scope))) return eval(*expr.args[1], scope);
      if (expr.args[2]) return eval(*expr.args[2], scope);
      return Value::undefined(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was defined.",
          expr.line));
  }
  return Value();
}

}  // namespace kestrel::chat
