// jinja2's tests: `value is name(args)`.
#include <fmt/format.h>

#include <set>

#include "chat/builtins.h"
#include "chat/interpreter.h"
#include "chat/pystring.h"

namespace kestrel::chat {
namespace {

const Value& required(const CallArgs& args, const std::string& test) {
  const Value* v = args.get(0, "other");
  if (!v) v = args.get(0, "value");
  if (!v) script_error(fmt::format("test '{}' needs an argument", test));
  return *v;
}

bool string_case_test(const Value& v, bool want_lower) {
  if (!v.is_string()) {
    std::string s = to_str(v);
    return want_lower ? pystr::lower(s) == s && pystr::upper(s) != s
                      : pystr::upper(s) == s && pystr::lower(s) != s;
  }
  const std::string& s = v.as_string();
  bool any_cased = false;
  for (char32_t c : pystr::decode(s)) {
    if (!pystr::is_cased(c)) continue;
    any_cased = true;
    if (want_lower ? pystr::to_lower(c) != c : pystr::to_upper(c) != c) return false;
  }
  return any_cased;
}

const std::set<std::string>& filter_names() {
  static const std::set<std::string> names = {
      "default", "d",          "upper",      "lower",       "capitalize", "title",  "trim",   "string",
      "safe",    "escape",     "e",          "forceescape", "replace",    "int",    "float",  "abs",
      "round",   "indent",     "tojson",     "center",      "wordcount",  "attr",   "format", "length",
      "count",   "first",      "last",       "list",        "items",      "join",   "map",    "select",
      "reject",  "selectattr", "rejectattr", "sort",        "dictsort",   "unique", "min",    "max",
      "sum",     "reverse",    "batch"};
  return names;
}

const std::set<std::string>& test_names() {
  static const std::set<std::string> names = {
      "defined",     "undefined", "none",    "boolean",  "true",        "false",    "integer", "float",
      "number",      "string",    "mapping", "sequence", "iterable",    "callable", "odd",     "even",
      "divisibleby", "eq",        "equalto", "==",       "ne",          "!=",       "lt",      "lessthan",
      "<",           "le",        "<=",      "gt",       "greaterthan", ">",        "ge",      ">=",
      "in",          "sameas",    "lower",   "upper",    "escaped",     "filter",   "test"};
  return names;
}

}  // namespace

bool is_known_filter(const std::string& name) { return filter_names().count(name) > 0; }
bool is_known_test(const std::string& name) { return test_names().count(name) > 0; }

bool call_test(Interpreter& /*interp*/, const std::string& name, const Value& input, CallArgs& args,
               bool& result) {
  if (name == "defined") {
    result = !input.is_undefined();
  } else if (name == "undefined") {
    result = input.is_undefined();
  } else if (name == "none") {
    result = input.is_none();
  } else if (name == "boolean") {
    result = input.is_bool();
  } else if (name == "true" || name == "false") {
    result = input.is_bool() && input.as_bool() == (name == "true");
  } else if (name == "integer") {
    result = input.is_int();
  } else if (name == "float") {
    result = input.is_float();
  } else if (name == "number") {
    result = input.is_number();
  } else if (name == "string") {
    result = input.is_string();
  } else if (name == "mapping") {
    result = input.is_dict();
  } else if (name == "sequence") {
    // len() and __getitem__: str, list, tuple, dict, and Undefined (which has a length of 0).
    result = input.is_string() || input.is_sequence() || input.is_dict() || input.is_undefined();
  } else if (name == "iterable") {
    result = input.is_string() || input.is_sequence() || input.is_dict() || input.is_undefined() ||
             input.is_loop() || input.is_generator();
  } else if (name == "callable") {
    result = input.is_callable();
  } else if (name == "odd" || name == "even") {
    if (!input.is_number())
      script_error(fmt::format("unsupported operand type(s) for %: '{}' and 'int'", python_type_name(input)));
    result = values_equal(binary_op("%", input, Value(2)), Value(name == "odd" ? 1 : 0));
  } else if (name == "divisibleby") {
    result = !truthy(binary_op("%", input, required(args, name)));
  } else if (name == "eq" || name == "equalto" || name == "==") {
    result = compare_op("==", input, required(args, name));
  } else if (name == "ne" || name == "!=") {
    result = compare_op("!=", input, required(args, name));
  } else if (name == "lt" || name == "lessthan" || name == "<") {
    result = compare_op("<", input, required(args, name));
  } else if (name == "le" || name == "<=") {
    result = compare_op("<=", input, required(args, name));
  } else if (name == "gt" || name == "greaterthan" || name == ">") {
    result = compare_op(">", input, required(args, name));
  } else if (name == "ge" || name == ">=") {
    result = compare_op(">=", input, required(args, name));
  } else if (name == "in") {
    const Value* seq = args.get(0, "seq");
    if (!seq) script_error("test 'in' needs an argument");
    result = compare_op("in", input, *seq);
  } else if (name == "sameas") {
    const Value& other = required(args, name);
    if (input.identity() || other.identity()) {
      result = input.identity() == other.identity();
    } else {
      // Python's `is` on None, booleans and (small) equal scalars.
      result = input.kind() == other.kind() && values_equal(input, other);
    }
  } else if (name == "lower" || name == "upper") {
    result = string_case_test(input, name == "lower");
  } else if (name == "escaped") {
    result = input.is_markup();
  } else if (name == "filter") {
    result = is_known_filter(to_str(input));
  } else if (name == "test") {
    result = is_known_test(to_str(input));
  } else {
    return false;
  }
  return true;
}

}  // namespace kestrel::chat
