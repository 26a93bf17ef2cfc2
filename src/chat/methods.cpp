// Methods of str, dict, list and tuple, bound to their receiver. The immutable sandbox hides the
// methods that modify a list or dict: they read as an Undefined that fails when called.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "chat/builtins.h"
#include "chat/pystring.h"

namespace kestrel::chat {
namespace {

std::optional<std::string> opt_string(const Value* v, const char* what) {
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) script_error(fmt::format("{} arg must be None or str", what));
  return v->as_string();
}

int64_t opt_int(const Value* v, int64_t fallback) {
  if (!v || v->is_none()) return fallback;
  if (!v->is_int() && !v->is_bool())
    script_error(fmt::format("'{}' object cannot be interpreted as an integer", python_type_name(*v)));
  return v->as_int();
}

const std::string& string_arg(const CallArgs& args, size_t i, const char* name, const char* method) {
  const Value* v = args.get(i, name);
  if (!v) script_error(fmt::format("{}() missing required argument '{}'", method, name));
  if (!v->is_string())
    script_error(fmt::format("{}() argument must be str, not {}", method, python_type_name(*v)));
  return v->as_string();
}

Value string_list(const std::vector<std::string>& parts) {
  ValueList out;
  for (const auto& p : parts) out.emplace_back(p);
  return Value::list(std::move(out));
}

Value strip_method(const Value& self, CallArgs& args, bool left, bool right) {
  args.expect_at_most(1, {}, "strip");
  return Value(pystr::strip(self.as_string(), opt_string(args.get(0, ""), "strip"), left, right));
}

// startswith / endswith: prefix may be a tuple of strings.
Value affix_method(const Value& self, CallArgs& args, bool at_start) {
  args.expect_at_most(1, {}, at_start ? "startswith" : "endswith");
  const Value* arg = args.get(0, "");
  if (!arg) script_error("startswith() takes at least 1 argument (0 given)");
  ValueList candidates = arg->is_tuple() ? arg->items() : ValueList{*arg};
  const std::string& s = self.as_string();
  for (const Value& c : candidates) {
    if (!c.is_string())
      script_error(fmt::format("{} first arg must be str or a tuple of str, not {}",
                               at_start ? "startswith" : "endswith", python_type_name(c)));
    const std::string& a = c.as_string();
    if (a.size() > s.size()) continue;
    if (at_start ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0)
      return Value(true);
  }
  return Value(false);
}

// str.format with automatic ({}), numbered ({0}) and named ({name}) fields and !r / !s.
Value format_method(const Value& self, CallArgs& args) {
  const std::string& f = self.as_string();
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}')
        ++i;
      else
        script_error("Single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = f.find('}', i);
    if (close == std::string::npos) script_error("Single '{' encountered in format string");
    std::string field = f.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 's';
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = bang + 1 < field.size() ? field[bang + 1] : 's';
      field = field.substr(0, bang);
    }
    if (field.find(':') != std::string::npos) script_error("format specifications are not supported");
    const Value* value = nullptr;
    if (field.empty()) {
      value = auto_index < args.positional.size() ? &args.positional[auto_index] : nullptr;
      ++auto_index;
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      size_t n = std::stoul(field);
      value = n < args.positional.size() ? &args.positional[n] : nullptr;
    } else {
      for (const auto& [key, v] : args.keyword)
        if (key == field) value = &v;
    }
    if (!value)
      script_error(fmt::format("Replacement index {} out of range for positional args tuple", field));
    out += conversion == 'r' ? to_repr(*value) : to_str(*value);
  }
  return Value(std::move(out));
}

Value string_method(const Value& self, const std::string& name, CallArgs& args) {
  const std::string& s = self.as_string();
  if (name == "strip") return strip_method(self, args, true, true);
  if (name == "lstrip") return strip_method(self, args, true, false);
  if (name == "rstrip") return strip_method(self, args, false, true);
  if (name == "split" || name == "rsplit") {
    args.expect_at_most(2, {"sep", "maxsplit"}, name);
    auto sep = opt_string(args.get(0, "sep"), "sep");
    int64_t maxsplit = opt_int(args.get(1, "maxsplit"), -1);
    return string_list(name == "split" ? pystr::split(s, sep, maxsplit) : pystr::rsplit(s, sep, maxsplit));
  }
  if (name == "splitlines") {
    args.expect_at_most(1, {"keepends"}, name);
    const Value* keep = args.get(0, "keepends");
    return string_list(pystr::splitlines(s, keep && truthy(*keep)));
  }
  if (name == "startswith") return affix_method(self, args, true);
  if (name == "endswith") return affix_method(self, args, false);
  if (name == "replace") {
    args.expect_at_most(3, {"count"}, name);
    return Value(pystr::replace(s, string_arg(args, 0, "old", "replace"),
                                string_arg(args, 1, "new", "replace"), opt_int(args.get(2, "count"), -1)));
  }
  if (name == "upper") return Value(pystr::upper(s));
  if (name == "lower" || name == "casefold") return Value(pystr::lower(s));
  if (name == "title") return Value(pystr::title(s));
  if (name == "capitalize") return Value(pystr::capitalize(s));
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    args.expect_at_most(1, {}, name);
    int64_t at = pystr::find(s, string_arg(args, 0, "sub", name.c_str()), name[0] == 'r');
    if (at < 0 && name.find("index") != std::string::npos) script_error("substring not found");
    return Value(at);
  }
  if (name == "count") {
    args.expect_at_most(1, {}, name);
    return Value(pystr::count(s, string_arg(args, 0, "sub", "count")));
  }
  if (name == "format") return format_method(self, args);
  if (name == "join") {
    args.expect_at_most(1, {}, name);
    const Value* items = args.get(0, "iterable");
    if (!items) script_error("join() takes exactly one argument (0 given)");
    std::string out;
    ValueList parts = iterate(*items);
    for (size_t i = 0; i < parts.size(); ++i) {
      if (!parts[i].is_string())
        script_error(
            fmt::format("sequence item {}: expected str instance, {} found", i, python_type_name(parts[i])));
      if (i) out += s;
      out += parts[i].as_string();
    }
    return Value(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string& a = string_arg(args, 0, "affix", name.c_str());
    bool prefix = name == "removeprefix";
    bool match = a.size() <= s.size() &&
                 (prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0);
    if (!match) return self;
    return Value(prefix ? s.substr(a.size()) : s.substr(0, s.size() - a.size()));
  }
  if (name == "isspace") return Value(pystr::all_of(s, pystr::is_space));
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
    return Value(pystr::all_of(s, [](char32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha")
    return Value(pystr::all_of(s, [](char32_t c) { return pystr::is_cased(c) || c > 0x2E7F; }));
  if (name == "isalnum")
    return Value(pystr::all_of(
        s, [](char32_t c) { return (c >= '0' && c <= '9') || pystr::is_cased(c) || c > 0x2E7F; }));
  if (name == "islower" || name == "isupper") {
    bool want_lower = name == "islower";
    bool any_cased = false;
    for (char32_t c : pystr::decode(s)) {
      if (!pystr::is_cased(c)) continue;
      any_cased = true;
      if (want_lower ? pystr::to_lower(c) != c : pystr::to_upper(c) != c) return Value(false);
    }
    return Value(any_cased);
  }
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
    int64_t width = opt_int(args.get(0, "width"), 0);
    int64_t len = static_cast<int64_t>(pystr::length(s));
    if (width <= len) return self;
    size_t pad = static_cast<size_t>(width - len);
    std::string fill = name == "zfill" ? "0" : " ";
    if (const Value* f = args.get(1, "fillchar"); f && f->is_string()) fill = f->as_string();
    auto repeat = [&](size_t n) {
      std::string r;
      for (size_t i = 0; i < n; ++i) r += fill;
      return r;
    };
    if (name == "ljust") return Value(s + repeat(pad));
    if (name == "rjust" || name == "zfill") return Value(repeat(pad) + s);
    size_t left = pad / 2 + (pad & static_cast<size_t>(width) & 1);
    return Value(repeat(left) + s + repeat(pad - left));
  }
  script_error(fmt::format("'str' object has no attribute '{}'", name));
}

const std::set<std::string>& string_method_names() {
  static const std::set<std::string> names = {
      "strip",        "lstrip",       "rstrip",  "split",   "rsplit",    "splitlines", "startswith",
      "endswith",     "replace",      "upper",   "lower",   "casefold",  "title",      "capitalize",
      "find",         "rfind",        "index",   "rindex",  "count",     "format",     "join",
      "removeprefix", "removesuffix", "isspace", "isdigit", "isnumeric", "isdecimal",  "isalpha",
      "isalnum",      "islower",      "isupper", "center",  "ljust",     "rjust",      "zfill"};
  return names;
}

Value dict_method(const Value& self, const std::string& name, CallArgs& args) {
  const DictData& d = self.dict_data();
  if (name == "get") {
    args.expect_at_most(2, {}, "get");
    const Value* key = args.get(0, "key");
    if (!key) script_error("get expected at least 1 argument, got 0");
    if (const Value* v = d.find(*key)) return *v;
    const Value* fallback = args.get(1, "default");
    return fallback ? *fallback : Value::none();
  }
  args.expect_at_most(0, {}, name);
  ValueList out;
  for (const auto& [key, value] : d.entries) {
    if (name == "items")
      out.push_back(Value::tuple({key, value}));
    else if (name == "keys")
      out.push_back(key);
    else
      out.push_back(value);
  }
  if (name == "copy") {
    Value copy = Value::dict();
    copy.dict_data() = d;
    return copy;
  }
  return Value::list(std::move(out));
}

Value sequence_method(const Value& self, const std::string& name, CallArgs& args) {
  if (name == "copy") return Value::list(self.items());
  args.expect_at_most(1, {}, name);
  const Value* x = args.get(0, "value");
  if (!x) script_error(fmt::format("{}() takes exactly one argument (0 given)", name));
  const ValueList& items = self.items();
  int64_t n = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!values_equal(items[i], *x)) continue;
    if (name == "index") return Value(static_cast<int64_t>(i));
    ++n;
  }
  if (name == "index") script_error(fmt::format("{} is not in list", to_repr(*x)));
  return Value(n);
}

Value bind(const Value& self, const std::string& name,
           Value (*fn)(const Value&, const std::string&, CallArgs&)) {
  return Value::callable(name,
                         [self, name, fn](Interpreter&, CallArgs& args) { return fn(self, name, args); });
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined(
      fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, python_type_name(obj)));
}

}  // namespace

std::optional<Value> find_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) {
    if (string_method_names().count(name)) return bind(obj, name, string_method);
    return std::nullopt;
  }
  if (obj.is_dict()) {
    if (name == "get" || name == "items" || name == "keys" || name == "values" || name == "copy")
      return bind(obj, name, dict_method);
    if (name == "clear" || name == "pop" || name == "popitem" || name == "setdefault" || name == "update")
      return unsafe(obj, name);
    return std::nullopt;
  }
  if (obj.is_sequence()) {
    if (name == "count" || name == "index" || (name == "copy" && obj.is_list()))
      return bind(obj, name, sequence_method);
    if (obj.is_list() && (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
                          name == "remove" || name == "reverse" || name == "sort" || name == "clear"))
      return unsafe(obj, name);
  }
  return std::nullopt;
}

}  // namespace kestrel::chat
