// The syntax tree of a parsed template: expressions and statements, each with its source position.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chat/value.h"

namespace kestrel::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Keyword {
  std::string name;
  ExprPtr value;
};

struct Expr {
  enum class Kind {
    Const,     // constant
    Name,      // name
    List,      // args: items
    Tuple,     // args: items
    Dict,      // args: key, value, key, value, ...
    Getattr,   // target.name
    Getitem,   // target[args[0]]
    Slice,     // args: start, stop, step (each may be null); only inside Getitem
    Call,      // target(args..., kwargs...)
    Filter,    // target | name(args..., kwargs...); target is null in filter blocks
    Test,      // target is name(args..., kwargs...)
    Not,       // not args[0]
    Neg,       // -args[0]
    Pos,       // +args[0]
    Binary,    // args[0] <name> args[1], name one of + - * / // % **
    And,       // args[0] and args[1]
    Or,        // args[0] or args[1]
    Compare,   // args[0] ops[0] args[1] ops[1] args[2] ...; ops: == != < <= > >= in notin
    Concat,    // args[0] ~ args[1] ~ ...
    CondExpr,  // args[1] if args[0] else args[2] (args[2] may be null)
  };

  Kind kind;
  int line = 1;
  int column = 1;
  Value constant;
  std::string name;
  ExprPtr target;
  std::vector<ExprPtr> args;
  std::vector<Keyword> kwargs;
  std::vector<std::string> ops;

  Expr(Kind k, int l, int c) : kind(k), line(l), column(c) {}
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// An assignment target: a name, a tuple of names (for unpacking) or a namespace attribute.
struct Target {
  std::vector<std::string> names;
  bool is_tuple = false;
  std::string attribute;  // non-empty for `ns.attr`: names[0] is the namespace variable
};

struct Stmt {
  enum class Kind {
    Data,         // text
    Print,        // exprs: expressions to print ({{ }} and {% print %})
    If,           // exprs: conditions; bodies: one per condition, then the else body if any
    For,          // target in exprs[0] [if exprs[1]]; bodies[0] loop body, bodies[1] else body
    Set,          // target = exprs[0]
    SetBlock,     // target = rendered bodies[0], through filter exprs[0] when not null
    Macro,        // name(params) with bodies[0]
    CallBlock,    // exprs[0] is the call; params are the caller's; bodies[0] is the caller body
    FilterBlock,  // exprs[0] is the filter chain; bodies[0] the text it filters
    With,         // params with defaults = values; bodies[0]
    Generation,   // transformers' {% generation %} marker: renders bodies[0]
    Break,
    Continue,
  };

  Kind kind;
  int line = 1;
  int column = 1;
  std::string text;
  std::string name;
  Target target;
  std::vector<ExprPtr> exprs;
  std::vector<Body> bodies;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // aligned with params; null when a parameter has no default

  Stmt(Kind k, int l, int c) : kind(k), line(l), column(c) {}
};

}  // namespace kestrel::chat
