#include "chat/value.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "chat/pystring.h"
#include "core/utf8.h"

namespace kestrel::chat {

void script_error(const std::string& message) { throw ScriptError(message); }

Value Value::undefined(std::string hint) {
  Value v;
  v.payload_ = std::move(hint);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}

Value Value::list(ValueList items) {
  Value v;
  v.kind_ = Kind::List;
  v.payload_ = std::make_shared<ValueList>(std::move(items));
  return v;
}

Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::Tuple;
  return v;
}

Value Value::dict() {
  Value v;
  v.kind_ = Kind::Dict;
  v.payload_ = std::make_shared<DictData>();
  return v;
}

Value Value::namespace_object() {
  Value v = dict();
  v.kind_ = Kind::Namespace;
  return v;
}

Value Value::callable(std::string name, NativeFunction function) {
  Value v;
  v.kind_ = Kind::Callable;
  v.payload_ = std::make_shared<CallableData>(CallableData{std::move(name), std::move(function)});
  return v;
}

Value Value::loop(std::shared_ptr<LoopData> data) {
  Value v;
  v.kind_ = Kind::Loop;
  v.payload_ = std::move(data);
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = dict();
      for (const auto& [key, item] : json.items()) d.dict_data().set(Value(key), from_json(item));
      return d;
    }
    default: return none();  // binary and discarded values have no Python counterpart
  }
}

Value Value::generator(ValueList items) {
  Value v;
  v.kind_ = Kind::Generator;
  v.payload_ = std::make_shared<GeneratorData>(GeneratorData{std::move(items), 0});
  return v;
}

int64_t Value::as_int() const {
  if (kind_ == Kind::Bool) return std::get<bool>(payload_) ? 1 : 0;
  return std::get<int64_t>(payload_);
}

double Value::as_float() const {
  if (kind_ == Kind::Float) return std::get<double>(payload_);
  return static_cast<double>(as_int());
}

const void* Value::identity() const {
  switch (kind_) {
    case Kind::List:
    case Kind::Tuple: return std::get<std::shared_ptr<ValueList>>(payload_).get();
    case Kind::Dict:
    case Kind::Namespace: return std::get<std::shared_ptr<DictData>>(payload_).get();
    case Kind::Callable: return std::get<std::shared_ptr<CallableData>>(payload_).get();
    case Kind::Loop: return std::get<std::shared_ptr<LoopData>>(payload_).get();
    case Kind::Generator: return std::get<std::shared_ptr<GeneratorData>>(payload_).get();
    default: return nullptr;
  }
}

void Value::fail_undefined() const { script_error(undefined_hint()); }

const Value* DictData::find(const Value& key) const {
  if (key.is_string()) return find(key.as_string());
  for (const auto& [k, v] : entries)
    if (values_equal(k, key)) return &v;
  return nullptr;
}

const Value* DictData::find(const std::string& key) const {
  for (const auto& [k, v] : entries)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

void DictData::set(const Value& key, Value value) {
  for (auto& [k, v] : entries) {
    if (values_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

const Value* CallArgs::get(size_t position, const std::string& name) const {
  if (position < positional.size()) return &positional[position];
  for (const auto& [key, value] : keyword)
    if (key == name) return &value;
  return nullptr;
}

void CallArgs::expect_at_most(size_t positional_count, std::initializer_list<const char*> names,
                              const std::string& callee) const {
  if (positional.size() > positional_count)
    script_error(fmt::format("{}() takes at most {} positional arguments ({} given)", callee,
                             positional_count, positional.size()));
  for (const auto& [key, value] : keyword) {
    bool known = false;
    for (const char* n : names) known = known || key == n;
    if (!known) script_error(fmt::format("{}() got an unexpected keyword argument '{}'", callee, key));
  }
}

std::string python_type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return v.is_markup() ? "Markup" : "str";
    case Value::Kind::List: return "list";
    case Value::Kind::Tuple: return "tuple";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Namespace: return "TemplateNamespace";
    case Value::Kind::Callable: return "function";
    case Value::Kind::Loop: return "LoopContext";
    case Value::Kind::Generator: return "generator";
  }
  return "object";
}

std::string object_type_description(const Value& v) {
  if (v.is_none()) return "None";
  if (v.is_namespace()) return "transformers.utils.chat_template_utils.TemplateNamespace object";
  if (v.is_loop()) return "jinja2.runtime.LoopContext object";
  if (v.is_markup()) return "markupsafe.Markup object";
  return python_type_name(v) + " object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.as_bool();
    case Value::Kind::Int: return v.as_int() != 0;
    case Value::Kind::Float: return v.as_float() != 0.0;
    case Value::Kind::String: return !v.as_string().empty();
    case Value::Kind::List:
    case Value::Kind::Tuple: return !v.items().empty();
    case Value::Kind::Dict: return !v.dict_data().entries.empty();
    default: return true;
  }
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, d, std::chars_format::scientific);
  std::string sci(buffer, result.ptr);
  std::string out;
  if (sci[0] == '-') {
    out = "-";
    sci.erase(0, 1);
  }
  size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exponent = std::stoi(sci.substr(e + 1));
  int decpt = exponent + 1;
  int ndigits = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits.substr(0, 1);
    if (ndigits > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (decpt <= 0) {
    out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (decpt >= ndigits) {
    out += digits + std::string(static_cast<size_t>(decpt - ndigits), '0') + ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
  }
  return out;
}

namespace {

std::string join_reprs(const ValueList& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += to_repr(items[i]);
  }
  return out;
}

std::string dict_repr(const DictData& d) {
  std::string out = "{";
  for (size_t i = 0; i < d.entries.size(); ++i) {
    if (i) out += ", ";
    out += to_repr(d.entries[i].first) + ": " + to_repr(d.entries[i].second);
  }
  return out + "}";
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.as_bool() ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.as_int());
    case Value::Kind::Float: return float_repr(v.as_float());
    case Value::Kind::String: return v.as_string();
    case Value::Kind::List: return "[" + join_reprs(v.items()) + "]";
    case Value::Kind::Tuple: return "(" + join_reprs(v.items()) + (v.items().size() == 1 ? ",)" : ")");
    case Value::Kind::Dict: return dict_repr(v.dict_data());
    case Value::Kind::Namespace: return "<Namespace " + dict_repr(v.dict_data()) + ">";
    case Value::Kind::Callable: return "<function " + v.callable_data().name + ">";
    case Value::Kind::Loop:
      return fmt::format("<LoopContext {}/{}>", v.loop_data().index0 + 1, v.loop_data().items->size());
    case Value::Kind::Generator: return "<generator object>";
  }
  return "";
}

std::string to_repr(const Value& v) {
  if (v.is_string()) {
    std::string r = pystr::repr(v.as_string());
    return v.is_markup() ? "Markup(" + r + ")" : r;
  }
  if (v.is_undefined()) return "Undefined";
  return to_str(v);
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.as_string() == b.as_string();
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      const ValueList& x = a.items();
      const ValueList& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!values_equal(x[i], y[i])) return false;
      return true;
    }
    case Value::Kind::Dict: {
      const DictData& x = a.dict_data();
      const DictData& y = b.dict_data();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [key, value] : x.entries) {
        const Value* other = y.find(key);
        if (!other || !values_equal(value, *other)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

bool value_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.kind() == b.kind() && a.is_sequence()) {
    const ValueList& x = a.items();
    const ValueList& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!values_equal(x[i], y[i])) return value_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  script_error(fmt::format("'<' not supported between instances of '{}' and '{}'", python_type_name(a),
                           python_type_name(b)));
}

int64_t value_length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return static_cast<int64_t>(pystr::length(v.as_string()));
    case Value::Kind::List:
    case Value::Kind::Tuple: return static_cast<int64_t>(v.items().size());
    case Value::Kind::Dict: return static_cast<int64_t>(v.dict_data().entries.size());
    case Value::Kind::Loop: return static_cast<int64_t>(v.loop_data().items->size());
    default: script_error(fmt::format("object of type '{}' has no len()", python_type_name(v)));
  }
}

ValueList iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List:
    case Value::Kind::Tuple: return v.items();
    case Value::Kind::Generator: {
      GeneratorData& g = v.generator_data();
      ValueList rest(g.items.begin() + static_cast<long>(std::min(g.position, g.items.size())),
                     g.items.end());
      g.position = g.items.size();
      return rest;
    }
    case Value::Kind::Dict: {
      ValueList keys;
      for (const auto& entry : v.dict_data().entries) keys.push_back(entry.first);
      return keys;
    }
    case Value::Kind::String: {
      ValueList chars;
      for (std::string_view c : utf8_split_chars(v.as_string())) chars.emplace_back(std::string(c));
      return chars;
    }
    default: script_error(fmt::format("'{}' object is not iterable", python_type_name(v)));
  }
}

}  // namespace kestrel::chat
