// Python's json.dumps for template values, the way transformers' tojson filter calls it.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "chat/builtins.h"
#include "chat/pystring.h"

namespace kestrel::chat {
namespace {

void append_u_escape(std::string& out, uint32_t unit) { out += fmt::format("\\u{:04x}", unit); }

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t c : pystr::decode(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          if (c >= 0x10000) {
            uint32_t v = static_cast<uint32_t>(c) - 0x10000;
            append_u_escape(out, 0xD800 + (v >> 10));
            append_u_escape(out, 0xDC00 + (v & 0x3FF));
          } else {
            append_u_escape(out, static_cast<uint32_t>(c));
          }
        } else {
          out += pystr::encode(std::u32string(1, c));
        }
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return float_repr(d);
}

// A dict key as json.dumps converts it.
std::string json_key(const Value& key) {
  if (key.is_string()) return key.as_string();
  if (key.is_bool()) return key.as_bool() ? "true" : "false";
  if (key.is_none()) return "null";
  if (key.is_int()) return std::to_string(key.as_int());
  if (key.is_float()) return json_float(key.as_float());
  script_error(fmt::format("keys must be str, int, float, bool or None, not {}", python_type_name(key)));
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpOptions& options) : options_(options) {}

  void dump(const Value& v, int level) {
    if (++depth_ > 512) script_error("maximum recursion depth exceeded while encoding a JSON object");
    switch (v.kind()) {
      case Value::Kind::None: out_ += "null"; break;
      case Value::Kind::Bool: out_ += v.as_bool() ? "true" : "false"; break;
      case Value::Kind::Int: out_ += std::to_string(v.as_int()); break;
      case Value::Kind::Float: out_ += json_float(v.as_float()); break;
      case Value::Kind::String: append_json_string(out_, v.as_string(), options_.ensure_ascii); break;
      case Value::Kind::List:
      case Value::Kind::Tuple: dump_list(v.items(), level); break;
      case Value::Kind::Dict: dump_dict(v.dict_data(), level); break;
      default: script_error(fmt::format("Object of type {} is not JSON serializable", python_type_name(v)));
    }
    --depth_;
  }

  std::string take() { return std::move(out_); }

 private:
  const JsonDumpOptions& options_;
  std::string out_;
  int depth_ = 0;

  void newline(int level) {
    out_ += '\n';
    for (int i = 0; i < level; ++i) out_ += *options_.indent;
  }

  void separator(bool first, int level) {
    if (!first) out_ += options_.item_separator;
    if (options_.indent) newline(level);
  }

  void dump_list(const ValueList& items, int level) {
    if (items.empty()) {
      out_ += "[]";
      return;
    }
    out_ += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      separator(i == 0, level + 1);
      dump(items[i], level + 1);
    }
    if (options_.indent) newline(level);
    out_ += ']';
  }

  void dump_dict(const DictData& d, int level) {
    if (d.entries.empty()) {
      out_ += "{}";
      return;
    }
    std::vector<std::pair<std::string, const Value*>> entries;
    for (const auto& [key, value] : d.entries) entries.emplace_back(json_key(key), &value);
    if (options_.sort_keys)
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    out_ += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
      separator(i == 0, level + 1);
      append_json_string(out_, entries[i].first, options_.ensure_ascii);
      out_ += options_.key_separator;
      dump(*entries[i].second, level + 1);
    }
    if (options_.indent) newline(level);
    out_ += '}';
  }
};

}  // namespace

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  Dumper dumper(options);
  dumper.dump(v, 0);
  return dumper.take();
}

}  // namespace kestrel::chat
