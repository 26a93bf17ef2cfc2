// The operations, attributes, methods, filters, tests and globals a template can use, with the
// behaviour of Python and of jinja2's ImmutableSandboxedEnvironment as transformers sets it up.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>

#include "chat/value.h"

namespace kestrel::chat {

class Interpreter;

// operators.cpp
Value binary_op(const std::string& op, const Value& a, const Value& b);
Value unary_minus(const Value& v, bool negate);
// ==, !=, <, <=, >, >=, in, notin
bool compare_op(const std::string& op, const Value& a, const Value& b);
// jinja2's environment.getattr (obj.name) and getitem (obj[key]); missing -> Undefined.
Value get_attribute(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);

// percent_format.cpp: Python's `format % args` (args a tuple, a mapping or one value).
std::string percent_format(const std::string& format, const Value& args);

// methods.cpp: the methods of str, dict and list that the sandbox allows; nullopt if `name` is
// no method of obj's type. Unsafe (mutating) methods come back as an Undefined that fails.
std::optional<Value> find_method(const Value& obj, const std::string& name);

// filters.cpp / filters_seq.cpp
bool call_filter(Interpreter& interp, const std::string& name, const Value& input, CallArgs& args,
                 Value& result);
bool call_sequence_filter(Interpreter& interp, const std::string& name, const Value& input, CallArgs& args,
                          Value& result);
// tests.cpp
bool call_test(Interpreter& interp, const std::string& name, const Value& input, CallArgs& args,
               bool& result);

// The names call_filter/call_sequence_filter and call_test know (tests.cpp).
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

// globals.cpp: range, dict, namespace, raise_exception, strftime_now, cycler, joiner.
void install_globals(std::unordered_map<std::string, Value>& globals);

// pyjson.cpp: json.dumps(v, ensure_ascii, indent, separators, sort_keys) as transformers' tojson.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // None, or the string one level of indentation adds
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string json_dumps(const Value& v, const JsonDumpOptions& options);

}  // namespace kestrel::chat
