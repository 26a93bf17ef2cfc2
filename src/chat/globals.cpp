// The global functions a chat template can call: jinja2's range, dict, namespace and joiner, and
// transformers' raise_exception and strftime_now.
#include <fmt/format.h>

#include <chrono>
#include <ctime>

#include "chat/builtins.h"
#include "chat/interpreter.h"

namespace kestrel::chat {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

int64_t int_arg(const Value& v) {
  if (!v.is_int() && !v.is_bool())
    script_error(fmt::format("'{}' object cannot be interpreted as an integer", python_type_name(v)));
  return v.as_int();
}

Value range(Interpreter&, CallArgs& args) {
  if (!args.keyword.empty()) script_error("range() takes no keyword arguments");
  const ValueList& a = args.positional;
  if (a.empty() || a.size() > 3)
    script_error(fmt::format("range expected 1 to 3 arguments, got {}", a.size()));
  int64_t start = a.size() == 1 ? 0 : int_arg(a[0]);
  int64_t stop = a.size() == 1 ? int_arg(a[0]) : int_arg(a[1]);
  int64_t step = a.size() == 3 ? int_arg(a[2]) : 1;
  if (step == 0) script_error("range() arg 3 must not be zero");
  int64_t count = 0;
  if (step > 0 && start < stop) count = (stop - start + step - 1) / step;
  if (step < 0 && start > stop) count = (start - stop - step - 1) / -step;
  if (count > kMaxRange)
    script_error(
        fmt::format("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange));
  ValueList items;
  for (int64_t i = 0; i < count; ++i) items.emplace_back(start + i * step);
  return Value::list(std::move(items));
}

// dict(*args, **kwargs): a mapping or an iterable of pairs, then keyword entries.
Value make_dict(const CallArgs& args, const char* callee) {
  if (args.positional.size() > 1)
    script_error(fmt::format("{} expected at most 1 argument, got {}", callee, args.positional.size()));
  Value d = Value::dict();
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_dict() || source.is_namespace()) {
      for (const auto& [key, value] : source.dict_data().entries) d.dict_data().set(key, value);
    } else {
      for (const Value& pair : iterate(source)) {
        ValueList kv = iterate(pair);
        if (kv.size() != 2)
          script_error(
              fmt::format("dictionary update sequence element has length {}; 2 is required", kv.size()));
        d.dict_data().set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [key, value] : args.keyword) d.dict_data().set(Value(key), value);
  return d;
}

Value make_namespace(Interpreter&, CallArgs& args) {
  Value attrs = make_dict(args, "namespace");
  Value ns = Value::namespace_object();
  for (const auto& [key, value] : attrs.dict_data().entries) {
    if (key.is_string() && !key.as_string().empty() && key.as_string()[0] == '_')
      script_error(fmt::format(
          "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '{}'. "
          "Please rename the attribute.",
          key.as_string()));
    ns.dict_data().set(key, value);
  }
  return ns;
}

Value strftime_now(Interpreter& interp, CallArgs& args) {
  args.expect_at_most(1, {"format"}, "strftime_now");
  const Value* format = args.get(0, "format");
  if (!format || !format->is_string()) script_error("strftime_now() argument 'format' must be str");
  std::tm tm{};
  if (interp.now()) {
    tm = *interp.now();
  } else {
    std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    localtime_r(&t, &tm);
  }
  if (format->as_string().empty()) return Value("");
  std::string buffer(256, '\0');
  while (true) {
    size_t n = std::strftime(buffer.data(), buffer.size(), format->as_string().c_str(), &tm);
    if (n > 0) return Value(buffer.substr(0, n));
    if (buffer.size() > 65536) return Value("");
    buffer.resize(buffer.size() * 4);
  }
}

Value joiner(Interpreter&, CallArgs& args) {
  const Value* sep = args.get(0, "sep");
  std::string separator = sep ? to_str(*sep) : ", ";
  auto used = std::make_shared<bool>(false);
  return Value::callable("joiner", [separator, used](Interpreter&, CallArgs&) {
    if (!*used) {
      *used = true;
      return Value("");
    }
    return Value(separator);
  });
}

}  // namespace

void install_globals(std::unordered_map<std::string, Value>& globals) {
  globals["range"] = Value::callable("range", range);
  globals["dict"] =
      Value::callable("dict", [](Interpreter&, CallArgs& args) { return make_dict(args, "dict"); });
  globals["namespace"] = Value::callable("namespace", make_namespace);
  globals["joiner"] = Value::callable("joiner", joiner);
  globals["strftime_now"] = Value::callable("strftime_now", strftime_now);
  globals["raise_exception"] = Value::callable("raise_exception", [](Interpreter&, CallArgs& args) -> Value {
    const Value* message = args.get(0, "message");
    throw TemplateRaise(message ? to_str(*message) : "");
  });
}

}  // namespace kestrel::chat
