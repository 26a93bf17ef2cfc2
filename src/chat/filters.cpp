// jinja2's filters on single values (strings and numbers), and transformers' tojson.
#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "chat/builtins.h"
#include "chat/interpreter.h"
#include "chat/pystring.h"

namespace kestrel::chat {
namespace {

// jinja2's soft_str: str(value), keeping markup strings as markup.
Value soft_str(const Value& v) {
  if (v.is_string()) return v;
  return Value(to_str(v));
}

std::string remove_underscores(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '_') {
      out += s[i];
      continue;
    }
    bool between_digits = i > 0 && i + 1 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i - 1])) &&
                          std::isxdigit(static_cast<unsigned char>(s[i + 1]));
    if (!between_digits) return "";  // invalid
  }
  return out;
}

// Python int(text, base).
std::optional<int64_t> parse_int(const std::string& raw, int base) {
  std::string s = remove_underscores(pystr::strip(raw, std::nullopt, true, true));
  if (s.empty()) return std::nullopt;
  bool negative = false;
  size_t i = 0;
  if (s[0] == '+' || s[0] == '-') {
    negative = s[0] == '-';
    i = 1;
  }
  if (i + 1 < s.size() && s[i] == '0') {
    char p = static_cast<char>(s[i + 1] | 0x20);
    int prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefixed && (base == 0 || base == prefixed)) {
      base = prefixed;
      i += 2;
    }
  }
  if (base == 0) {
    base = 10;
    if (s.size() - i > 1 && s[i] == '0' && s.find_first_not_of('0', i) != std::string::npos)
      return std::nullopt;
  }
  if (i >= s.size()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(s.c_str() + i, &end, base);
  if (errno != 0 || *end != '\0' || s[i] == '+' || s[i] == '-' || s[i] == ' ') return std::nullopt;
  return negative ? -value : value;
}

// Python float(text).
std::optional<double> parse_float(const std::string& raw) {
  std::string s = pystr::lower(pystr::strip(raw, std::nullopt, true, true));
  std::string body = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? s.substr(1) : s;
  double sign = (!s.empty() && s[0] == '-') ? -1.0 : 1.0;
  if (body == "inf" || body == "infinity") return sign * INFINITY;
  if (body == "nan") return NAN;
  if (s.empty() || s.find_first_of("xpn") != std::string::npos) return std::nullopt;
  std::string cleaned = remove_underscores(s);
  if (cleaned.empty()) return std::nullopt;
  char* end = nullptr;
  double value = std::strtod(cleaned.c_str(), &end);
  if (*end != '\0') return std::nullopt;
  return value;
}

Value to_int(const Value& v, const Value& fallback, int base) {
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_float())) return fallback;
    return Value(static_cast<int64_t>(std::trunc(v.as_float())));
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string(), base)) return Value(*i);
    if (auto f = parse_float(v.as_string()); f && std::isfinite(*f))
      return Value(static_cast<int64_t>(std::trunc(*f)));
  }
  return fallback;
}

Value to_float(const Value& v, const Value& fallback) {
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string())
    if (auto f = parse_float(v.as_string())) return Value(*f);
  return fallback;
}

Value indent(const Value& input, CallArgs& args) {
  args.expect_at_most(4, {"width", "first", "blank"}, "indent");
  const Value* width = args.get(0, "width");
  std::string indention = "    ";
  if (width && width->is_string()) {
    indention = width->as_string();
  } else if (width) {
    indention =
        std::string(static_cast<size_t>(std::max<int64_t>(0, to_int(*width, Value(0), 10).as_int())), ' ');
  }
  const Value* first = args.get(1, "first");
  const Value* blank = args.get(2, "blank");
  if (input.is_undefined()) input.fail_undefined();
  if (!input.is_string())
    script_error(fmt::format("unsupported operand type(s) for +=: '{}' and 'str'", python_type_name(input)));
  std::string s = input.as_string() + "\n";
  std::vector<std::string> lines = pystr::splitlines(s, false);
  std::string rv;
  if (blank && truthy(*blank)) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : indention) + lines[i];
  }
  if (first && truthy(*first)) rv = indention + rv;
  return input.is_markup() ? Value::markup(rv) : Value(rv);
}

Value tojson(const Value& input, CallArgs& args) {
  args.expect_at_most(5, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson");
  JsonDumpOptions options;
  if (const Value* a = args.get(0, "ensure_ascii")) options.ensure_ascii = truthy(*a);
  if (const Value* i = args.get(1, "indent"); i && !i->is_none()) {
    if (i->is_string()) {
      options.indent = i->as_string();
    } else if (i->is_int() || i->is_bool()) {
      options.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, i->as_int())), ' ');
    } else {
      script_error(fmt::format("indent must be int or str, not {}", python_type_name(*i)));
    }
    options.item_separator = ",";
  }
  if (const Value* sep = args.get(2, "separators"); sep && !sep->is_none()) {
    if (!sep->is_sequence() || sep->items().size() != 2 || !sep->items()[0].is_string() ||
        !sep->items()[1].is_string())
      script_error("separators must be a (item_separator, key_separator) pair of strings");
    options.item_separator = sep->items()[0].as_string();
    options.key_separator = sep->items()[1].as_string();
  }
  if (const Value* s = args.get(3, "sort_keys")) options.sort_keys = truthy(*s);
  return Value(json_dumps(input, options));
}

Value round_filter(const Value& input, CallArgs& args) {
  args.expect_at_most(2, {"precision", "method"}, "round");
  const Value* p = args.get(0, "precision");
  int64_t precision = p ? p->as_int() : 0;
  std::string method = "common";
  if (const Value* m = args.get(1, "method")) method = to_str(*m);
  if (!input.is_number())
    script_error(fmt::format("type {} doesn't define __round__ method", python_type_name(input)));
  double x = input.as_float();
  if (method == "common" && !input.is_float()) {
    // round(int, n) stays an int; a negative n rounds to tens, hundreds, ... (half to even).
    int64_t value = input.as_int();
    if (precision >= 0) return Value(value);
    if (precision < -18) return Value(int64_t{0});
    int64_t unit = 1;
    for (int64_t i = 0; i < -precision; ++i) unit *= 10;
    int64_t q = value / unit, r = value % unit;
    if (r < 0) {
      r += unit;
      --q;
    }
    if (2 * r > unit || (2 * r == unit && q % 2 != 0)) ++q;
    return Value(q * unit);
  }
  if (method == "common") {
    if (precision < 0 || precision > 20) {
      double scale = std::pow(10.0, static_cast<double>(precision));
      return Value(std::nearbyint(x * scale) / scale);
    }
    return Value(std::strtod(fmt::format("{:.{}f}", x, precision).c_str(), nullptr));
  }
  if (method != "floor" && method != "ceil") script_error("method must be common, ceil or floor");
  double scale = std::pow(10.0, static_cast<double>(precision));
  return Value((method == "floor" ? std::floor(x * scale) : std::ceil(x * scale)) / scale);
}

// jinja2's title filter: capitalizes after whitespace, '-', and opening brackets.
std::string jinja_title(const std::string& s) {
  std::u32string text = pystr::decode(s);
  std::u32string out;
  bool word_start = true;
  for (char32_t c : text) {
    bool separator = pystr::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (separator) {
      out += c;
      word_start = true;
    } else if (word_start) {
      out += pystr::decode(pystr::upper(pystr::encode(std::u32string(1, c))));
      word_start = false;
    } else {
      out += pystr::to_lower(c);
    }
  }
  return pystr::encode(out);
}

}  // namespace

bool call_filter(Interpreter& interp, const std::string& name, const Value& input, CallArgs& args,
                 Value& result) {
  auto text = [&]() { return to_str(input); };
  if (name == "default" || name == "d") {
    args.expect_at_most(2, {"default_value", "boolean"}, name);
    const Value* fallback = args.get(0, "default_value");
    const Value* boolean = args.get(1, "boolean");
    bool use_default = input.is_undefined() || (boolean && truthy(*boolean) && !truthy(input));
    result = use_default ? (fallback ? *fallback : Value("")) : input;
  } else if (name == "upper") {
    result = Value(pystr::upper(text()));
  } else if (name == "lower") {
    result = Value(pystr::lower(text()));
  } else if (name == "capitalize") {
    result = Value(pystr::capitalize(text()));
  } else if (name == "title") {
    result = Value(jinja_title(text()));
  } else if (name == "trim") {
    args.expect_at_most(1, {"chars"}, name);
    const Value* chars = args.get(0, "chars");
    std::optional<std::string> set;
    if (chars && !chars->is_none()) set = to_str(*chars);
    result = Value(pystr::strip(text(), set, true, true));
  } else if (name == "string") {
    result = soft_str(input);
  } else if (name == "safe") {
    result = Value::markup(text());
  } else if (name == "escape" || name == "e" || name == "forceescape") {
    result = input.is_markup() && name != "forceescape" ? input : Value::markup(pystr::html_escape(text()));
  } else if (name == "replace") {
    args.expect_at_most(3, {"old", "new", "count"}, name);
    const Value* old_value = args.get(0, "old");
    const Value* new_value = args.get(1, "new");
    if (!old_value || !new_value) script_error("replace() missing required arguments 'old' and 'new'");
    const Value* count = args.get(2, "count");
    int64_t n = (count && !count->is_none()) ? count->as_int() : -1;
    result = Value(pystr::replace(text(), to_str(*old_value), to_str(*new_value), n));
  } else if (name == "int") {
    args.expect_at_most(2, {"default", "base"}, name);
    const Value* fallback = args.get(0, "default");
    const Value* base = args.get(1, "base");
    if (input.is_undefined()) input.fail_undefined();  // Undefined.__int__ fails
    result = to_int(input, fallback ? *fallback : Value(0), base ? static_cast<int>(base->as_int()) : 10);
  } else if (name == "float") {
    args.expect_at_most(1, {"default"}, name);
    const Value* fallback = args.get(0, "default");
    if (input.is_undefined()) input.fail_undefined();  // Undefined.__float__ fails
    result = to_float(input, fallback ? *fallback : Value(0.0));
  } else if (name == "abs") {
    if (!input.is_number())
      script_error(fmt::format("bad operand type for abs(): '{}'", python_type_name(input)));
    result = input.is_float()
                 ? Value(std::fabs(input.as_float()))
                 : Value(static_cast<int64_t>(input.as_int() < 0 ? -input.as_int() : input.as_int()));
  } else if (name == "round") {
    result = round_filter(input, args);
  } else if (name == "indent") {
    result = indent(input, args);
  } else if (name == "tojson") {
    result = tojson(input, args);
  } else if (name == "center") {
    const Value* width = args.get(0, "width");
    CallArgs method_args;
    method_args.positional.push_back(width ? *width : Value(80));
    result = interp.call(*find_method(Value(text()), "center"), method_args);
  } else if (name == "wordcount") {
    result = Value(static_cast<int64_t>(pystr::split(text(), std::nullopt, -1).size()));
  } else if (name == "format") {
    if (!args.positional.empty() && !args.keyword.empty())
      script_error("can't handle positional and keyword arguments at the same time");
    Value format_args = Value::tuple(args.positional);
    if (!args.keyword.empty()) {
      format_args = Value::dict();
      for (const auto& [key, value] : args.keyword) format_args.dict_data().set(Value(key), value);
    }
    result = Value(percent_format(text(), format_args));
  } else if (name == "attr") {
    const Value* attribute = args.get(0, "name");
    if (!attribute) script_error("attr() missing required argument 'name'");
    result = get_attribute(input, to_str(*attribute));
  } else {
    return false;
  }
  return true;
}

}  // namespace kestrel::chat
