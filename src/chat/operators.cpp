// Python operators, attribute and item access, slicing.
#include <fmt/format.h>

#include <cmath>

#include "chat/builtins.h"
#include "chat/pystring.h"

namespace kestrel::chat {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  script_error(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, python_type_name(a),
                           python_type_name(b)));
}

int64_t checked(bool overflowed, int64_t value) {
  if (overflowed) script_error("integer result too large for this interpreter (64-bit)");
  return value;
}

// CPython's float divmod: the floor quotient and the modulo with the sign of the divisor.
std::pair<double, double> python_divmod(double vx, double wx) {
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  double floordiv = 0.0;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
  return {floordiv, mod};
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value repeat(const Value& seq, const Value& count) {
  int64_t n = std::max<int64_t>(0, count.as_int());
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

bool is_integral(const Value& v) { return v.is_int() || v.is_bool(); }

Value add(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return Value(a.as_float() + b.as_float());
    int64_t r = 0;
    bool o = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
    return Value(checked(o, r));
  }
  if (a.is_string() && b.is_string()) {
    if (a.is_markup() || b.is_markup()) {
      std::string left = a.is_markup() ? a.as_string() : pystr::html_escape(a.as_string());
      std::string right = b.is_markup() ? b.as_string() : pystr::html_escape(b.as_string());
      return Value::markup(left + right);
    }
    return Value(a.as_string() + b.as_string());
  }
  if (a.kind() == b.kind() && a.is_sequence()) {
    ValueList out = a.items();
    out.insert(out.end(), b.items().begin(), b.items().end());
    return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  if (a.is_string() || a.is_sequence())
    script_error(fmt::format("can only concatenate {} (not \"{}\") to {}", python_type_name(a),
                             python_type_name(b), python_type_name(a)));
  unsupported("+", a, b);
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  // Python's str % x takes an Undefined (which has __getitem__) as a mapping, so this one works.
  if (op == "%" && a.is_string()) return Value(percent_format(a.as_string(), b));
  // Undefined defines every arithmetic operator (and its reflection) to fail.
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  if (op == "+") return add(a, b);
  if (op == "*") {
    if (a.is_number() && b.is_number()) {
      if (a.is_float() || b.is_float()) return Value(a.as_float() * b.as_float());
      int64_t r = 0;
      bool o = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
      return Value(checked(o, r));
    }
    if ((a.is_string() || a.is_sequence()) && is_integral(b)) return repeat(a, b);
    if ((b.is_string() || b.is_sequence()) && is_integral(a)) return repeat(b, a);
    if (a.is_string() || a.is_sequence() || b.is_string() || b.is_sequence())
      script_error(fmt::format("can't multiply sequence by non-int of type '{}'",
                               python_type_name(a.is_number() ? a : b)));
    unsupported("*", a, b);
  }
  if (!a.is_number() || !b.is_number()) unsupported(op, a, b);
  bool use_float = a.is_float() || b.is_float();
  if (op == "-") {
    if (use_float) return Value(a.as_float() - b.as_float());
    int64_t r = 0;
    bool o = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
    return Value(checked(o, r));
  }
  if (op == "/") {
    if (b.as_float() == 0.0) script_error("division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//" || op == "%") {
    if (use_float) {
      if (b.as_float() == 0.0) script_error(op == "%" ? "float modulo" : "float floor division by zero");
      auto [quotient, modulo] = python_divmod(a.as_float(), b.as_float());
      return Value(op == "%" ? modulo : quotient);
    }
    if (b.as_int() == 0) script_error("integer division or modulo by zero");
    if (a.as_int() == INT64_MIN && b.as_int() == -1)
      script_error("integer result too large for this interpreter (64-bit)");
    int64_t q = floor_div(a.as_int(), b.as_int());
    return Value(op == "//" ? q : a.as_int() - q * b.as_int());
  }
  if (op == "**") {
    if (!use_float && b.as_int() >= 0) {
      int64_t result = 1, base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; --e) {
        bool o = __builtin_mul_overflow(result, base, &result);
        checked(o, result);
        if (result == 0 || result == 1) break;
      }
      return Value(result);
    }
    if (a.as_float() < 0 && std::trunc(b.as_float()) != b.as_float())
      script_error("complex numbers (a negative number to a fractional power) are not supported");
    double result = std::pow(a.as_float(), b.as_float());
    if (std::isinf(result) && std::isfinite(a.as_float()) && std::isfinite(b.as_float())) {
      if (a.as_float() == 0.0) script_error("0.0 cannot be raised to a negative power");
      script_error("(34, 'Numerical result out of range')");
    }
    return Value(result);
  }
  script_error("unknown operator " + op);
}

Value unary_minus(const Value& v, bool negate) {
  if (v.is_undefined()) v.fail_undefined();
  if (v.is_float()) return Value(negate ? -v.as_float() : v.as_float());
  if (v.is_int() || v.is_bool()) {
    if (!negate) return Value(v.as_int());
    if (v.as_int() == INT64_MIN) script_error("integer result too large for this interpreter (64-bit)");
    return Value(-v.as_int());
  }
  script_error(fmt::format("bad operand type for unary {}: '{}'", negate ? '-' : '+', python_type_name(v)));
}

bool compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return values_equal(a, b);
  if (op == "!=") return !values_equal(a, b);
  if (op == "in" || op == "notin") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string())
        script_error(
            fmt::format("'in <string>' requires string as left operand, not {}", python_type_name(a)));
      found = b.as_string().find(a.as_string()) != std::string::npos;
    } else if (b.is_sequence()) {
      for (const Value& item : b.items()) found = found || values_equal(item, a);
    } else if (b.is_dict()) {
      if (a.is_list() || a.is_dict() || a.is_namespace())
        script_error(fmt::format("unhashable type: '{}'", python_type_name(a)));
      found = b.dict_data().find(a) != nullptr;
    } else if (b.is_generator()) {
      GeneratorData& g = b.generator_data();
      while (!found && g.position < g.items.size()) found = values_equal(g.items[g.position++], a);
    } else if (b.is_undefined()) {
      found = false;
    } else {
      script_error(fmt::format("argument of type '{}' is not iterable", python_type_name(b)));
    }
    return op == "in" ? found : !found;
  }
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  auto check = [&](bool ok) {
    if (!ok)
      script_error(fmt::format("'{}' not supported between instances of '{}' and '{}'", op,
                               python_type_name(a), python_type_name(b)));
  };
  check((a.is_number() && b.is_number()) || (a.is_string() && b.is_string()) ||
        (a.kind() == b.kind() && a.is_sequence()));
  if (op == "<") return value_less(a, b);
  if (op == ">") return value_less(b, a);
  if (op == "<=") return !value_less(b, a);
  if (op == ">=") return !value_less(a, b);
  script_error("unknown comparison " + op);
}

namespace {

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_description(obj), name));
}

Value loop_attribute(const Value& obj, const std::string& name) {
  const LoopData& loop = obj.loop_data();
  const ValueList& items = *loop.items;
  int64_t i = static_cast<int64_t>(loop.index0);
  int64_t n = static_cast<int64_t>(items.size());
  if (name == "index") return Value(i + 1);
  if (name == "index0") return Value(i);
  if (name == "revindex") return Value(n - i);
  if (name == "revindex0") return Value(n - i - 1);
  if (name == "first") return Value(i == 0);
  if (name == "last") return Value(i == n - 1);
  if (name == "length") return Value(n);
  if (name == "depth") return Value(int64_t{loop.depth});
  if (name == "depth0") return Value(int64_t{loop.depth - 1});
  if (name == "previtem") {
    if (i > 0) return items[static_cast<size_t>(i - 1)];
    return Value::undefined("there is no previous item");
  }
  if (name == "nextitem") {
    if (i + 1 < n) return items[static_cast<size_t>(i + 1)];
    return Value::undefined("there is no next item");
  }
  if (name == "cycle") {
    return Value::callable("cycle", [i](Interpreter&, CallArgs& args) -> Value {
      if (args.positional.empty()) script_error("no items for cycling given");
      return args.positional[static_cast<size_t>(i) % args.positional.size()];
    });
  }
  return missing_attribute(obj, name);
}

}  // namespace

Value get_attribute(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (!name.empty() && name[0] == '_') return missing_attribute(obj, name);
  if (obj.is_loop()) return loop_attribute(obj, name);
  if (obj.is_namespace()) {
    if (const Value* v = obj.dict_data().find(name)) return *v;
    return missing_attribute(obj, name);
  }
  if (auto method = find_method(obj, name)) return *method;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict_data().find(name)) return *v;
  }
  return missing_attribute(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (obj.is_dict()) {
    if (const Value* v = obj.dict_data().find(key)) return *v;
  } else if ((obj.is_sequence() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t n = value_length(obj);
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (obj.is_string()) return slice_value(obj, Value(i), Value(i + 1), Value::none());
      return obj.items()[static_cast<size_t>(i)];
    }
  } else if (obj.is_namespace() && key.is_string()) {
    // Namespaces are not subscriptable; jinja2 falls back to the attribute.
    return get_attribute(obj, key.as_string());
  }
  if (key.is_string()) {
    if (!key.as_string().empty() && key.as_string()[0] != '_' && !obj.is_namespace()) {
      if (obj.is_loop()) return loop_attribute(obj, key.as_string());
      if (auto method = find_method(obj, key.as_string())) return *method;
    }
    return missing_attribute(obj, key.as_string());
  }
  return Value::undefined(fmt::format("{} has no element {}", object_type_description(obj), to_repr(key)));
}

Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (!obj.is_string() && !obj.is_sequence())
    script_error(fmt::format("'{}' object is not subscriptable", python_type_name(obj)));
  auto index_of = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool())
      script_error("slice indices must be integers or None or have an __index__ method");
    return v.as_int();
  };
  int64_t n = value_length(obj);
  int64_t st = index_of(step).value_or(1);
  if (st == 0) script_error("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t i = *v < 0 ? *v + n : *v;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  int64_t begin = clamp(index_of(start), st > 0 ? 0 : n - 1);
  int64_t end = clamp(index_of(stop), st > 0 ? n : -1);
  std::vector<size_t> picks;
  for (int64_t i = begin; st > 0 ? i < end : i > end; i += st) picks.push_back(static_cast<size_t>(i));
  if (obj.is_string()) {
    std::u32string text = pystr::decode(obj.as_string());
    std::u32string out;
    for (size_t i : picks) out += text[i];
    return Value(pystr::encode(out));
  }
  ValueList out;
  for (size_t i : picks) out.push_back(obj.items()[i]);
  return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

}  // namespace kestrel::chat
