// Python's printf-style string formatting (`'%s' % x`), used by the `%` operator on strings and by
// jinja2's format filter.
#include <fmt/format.h>

#include <cmath>

#include "chat/builtins.h"
#include "chat/pystring.h"

namespace kestrel::chat {
namespace {

std::string pad(std::string s, size_t width, bool left_align, char fill) {
  size_t len = pystr::length(s);
  if (len >= width) return s;
  std::string padding(width - len, fill);
  if (left_align) return s + std::string(width - len, ' ');
  if (fill == '0' && !s.empty() && (s[0] == '-' || s[0] == '+' || s[0] == ' '))
    return s.substr(0, 1) + padding + s.substr(1);
  return padding + s;
}

double number_arg(const Value& v, char conversion) {
  if (!v.is_number())
    script_error(
        fmt::format("%{} format: a real number is required, not {}", conversion, python_type_name(v)));
  return v.as_float();
}

}  // namespace

std::string percent_format(const std::string& format, const Value& args) {
  ValueList positional;
  const DictData* mapping = nullptr;
  // Python treats any non-tuple, non-string argument with __getitem__ (dict, list, Undefined) as a
  // mapping, which may go unused.
  bool mapping_like = args.is_dict() || args.is_list() || args.is_undefined();
  if (args.is_tuple()) {
    positional = args.items();
  } else {
    if (args.is_dict()) mapping = &args.dict_data();
    positional.push_back(args);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) script_error("incomplete format");
    const Value* value = nullptr;
    if (format[i] == '(') {
      size_t close = format.find(')', i);
      if (close == std::string::npos || !mapping) script_error("format requires a mapping");
      value = mapping->find(format.substr(i + 1, close - i - 1));
      if (!value) script_error(fmt::format("'{}'", format.substr(i + 1, close - i - 1)));
      i = close + 1;
    }
    bool left = false, plus = false, space = false, alt = false;
    char fill = ' ';
    for (; i < format.size() && std::string("-+ #0").find(format[i]) != std::string::npos; ++i) {
      if (format[i] == '-') left = true;
      if (format[i] == '+') plus = true;
      if (format[i] == ' ') space = true;
      if (format[i] == '#') alt = true;
      if (format[i] == '0') fill = '0';
    }
    size_t width = 0;
    for (; i < format.size() && format[i] >= '0' && format[i] <= '9'; ++i)
      width = width * 10 + static_cast<size_t>(format[i] - '0');
    int precision = -1;
    if (i < format.size() && format[i] == '.') {
      precision = 0;
      for (++i; i < format.size() && format[i] >= '0' && format[i] <= '9'; ++i)
        precision = precision * 10 + (format[i] - '0');
    }
    if (i >= format.size()) script_error("incomplete format");
    char conversion = format[i];
    if (conversion == '%') {
      out += '%';
      continue;
    }
    if (!value) {
      if (next >= positional.size()) script_error("not enough arguments for format string");
      value = &positional[next++];
    }
    std::string text;
    std::string sign = plus ? "+" : space ? " " : "";
    switch (conversion) {
      case 's': text = to_str(*value); break;
      case 'r':
      case 'a': text = to_repr(*value); break;
      case 'd':
      case 'i':
      case 'u': {
        double d = number_arg(*value, conversion);
        int64_t n = value->is_float() ? static_cast<int64_t>(std::trunc(d)) : value->as_int();
        text = (n < 0 ? "" : sign) + std::to_string(n);
        break;
      }
      case 'x':
      case 'X':
      case 'o': {
        if (!value->is_int() && !value->is_bool())
          script_error(fmt::format("%{} format: an integer is required, not {}", conversion,
                                   python_type_name(*value)));
        int64_t n = value->as_int();
        uint64_t magnitude = n < 0 ? static_cast<uint64_t>(-(n + 1)) + 1 : static_cast<uint64_t>(n);
        std::string digits = conversion == 'o'   ? fmt::format("{:o}", magnitude)
                             : conversion == 'x' ? fmt::format("{:x}", magnitude)
                                                 : fmt::format("{:X}", magnitude);
        std::string prefix = alt ? (conversion == 'o' ? "0o" : conversion == 'x' ? "0x" : "0X") : "";
        text = (n < 0 ? "-" : sign) + prefix + digits;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        double d = number_arg(*value, conversion);
        int p = precision < 0 ? 6 : precision;
        std::string spec = fmt::format("{{:{}{}.{}{}}}", sign, alt ? "#" : "", p, conversion);
        text = fmt::format(fmt::runtime(spec), d);
        break;
      }
      case 'c':
        if (value->is_string()) {
          text = value->as_string();
        } else {
          text = pystr::encode(std::u32string(1, static_cast<char32_t>(value->as_int())));
        }
        break;
      default: script_error(fmt::format("unsupported format character '{}'", conversion));
    }
    if ((conversion == 's' || conversion == 'r' || conversion == 'a') && precision >= 0) {
      std::u32string u = pystr::decode(text);
      if (u.size() > static_cast<size_t>(precision))
        text = pystr::encode(u.substr(0, static_cast<size_t>(precision)));
    }
    out += pad(text, width, left, (conversion == 's' || conversion == 'r' || conversion == 'c') ? ' ' : fill);
  }
  if (!mapping_like && next < positional.size())
    script_error("not all arguments converted during string formatting");
  return out;
}

}  // namespace kestrel::chat
