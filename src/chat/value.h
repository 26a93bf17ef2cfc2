// The values a chat template computes with. They follow Python's data model as jinja2 sees it:
// None, bool, int, float, str, list, tuple, dict, plus jinja2's own objects (Undefined, namespace,
// loop, macros and other callables). Lists, dicts and namespaces are shared by reference, as in
// Python; only namespaces are ever modified (the sandbox forbids changing lists and dicts).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace kestrel::chat {

// A runtime failure inside a template, without a position yet: the interpreter adds the line and
// column of the expression or statement that raised it and turns it into a ChatTemplateError.
class ScriptError : public std::runtime_error {
 public:
  explicit ScriptError(const std::string& message) : std::runtime_error(message) {}
};

[[noreturn]] void script_error(const std::string& message);

// Thrown by the template's raise_exception(message) global; the interpreter turns it into a
// ChatTemplateError whose message is exactly `message`.
class TemplateRaise : public std::runtime_error {
 public:
  explicit TemplateRaise(const std::string& message) : std::runtime_error(message) {}
};

class Value;
struct DictData;
struct LoopData;
struct GeneratorData;
struct CallArgs;
class Interpreter;

using ValueList = std::vector<Value>;
// A builtin or macro. The interpreter is passed so that callables can call back into it.
using NativeFunction = std::function<Value(Interpreter&, CallArgs&)>;

struct CallableData {
  std::string name;
  NativeFunction function;
};

class Value {
 public:
  enum class Kind : uint8_t {
    Undefined,
    None,
    Bool,
    Int,
    Float,
    String,
    List,
    Tuple,
    Dict,
    Namespace,
    Callable,
    Loop,
    Generator
  };

  Value() : kind_(Kind::Undefined), payload_(std::string()) {}
  Value(bool b) : kind_(Kind::Bool), payload_(b) {}  // NOLINT: implicit like Python literals
  Value(int i) : kind_(Kind::Int), payload_(int64_t{i}) {}
  Value(int64_t i) : kind_(Kind::Int), payload_(i) {}
  Value(double d) : kind_(Kind::Float), payload_(d) {}
  Value(std::string s) : kind_(Kind::String), payload_(std::move(s)) {}
  Value(const char* s) : kind_(Kind::String), payload_(std::string(s)) {}

  // An undefined value; `hint` is the error raised when it is used in a way jinja2 forbids.
  static Value undefined(std::string hint);
  static Value none();
  // A markup string (jinja2's Markup, made by |safe and |escape): `+` escapes the other operand.
  static Value markup(std::string s);
  static Value list(ValueList items = {});
  static Value tuple(ValueList items);
  static Value dict();
  static Value namespace_object();
  static Value callable(std::string name, NativeFunction function);
  static Value loop(std::shared_ptr<LoopData> data);
  // A one-shot iterator, as jinja2's select/map/... filters return: always true, no length, and
  // empty once iterated.
  static Value generator(ValueList items);
  static Value from_json(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  // int, float or bool (Python's bool is an int).
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_markup() const { return kind_ == Kind::String && markup_; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::Tuple; }
  bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_callable() const { return kind_ == Kind::Callable; }
  bool is_loop() const { return kind_ == Kind::Loop; }
  bool is_generator() const { return kind_ == Kind::Generator; }

  bool as_bool() const { return std::get<bool>(payload_); }
  int64_t as_int() const;   // Int or Bool
  double as_float() const;  // any number
  const std::string& as_string() const { return std::get<std::string>(payload_); }
  const std::string& undefined_hint() const { return std::get<std::string>(payload_); }
  const ValueList& items() const { return *std::get<std::shared_ptr<ValueList>>(payload_); }
  DictData& dict_data() const { return *std::get<std::shared_ptr<DictData>>(payload_); }
  const CallableData& callable_data() const { return *std::get<std::shared_ptr<CallableData>>(payload_); }
  LoopData& loop_data() const { return *std::get<std::shared_ptr<LoopData>>(payload_); }
  GeneratorData& generator_data() const { return *std::get<std::shared_ptr<GeneratorData>>(payload_); }
  // Identity of a shared object (for `is sameas`); null for plain values.
  const void* identity() const;

  // Raises the error this undefined value carries.
  [[noreturn]] void fail_undefined() const;

 private:
  Kind kind_;
  bool markup_ = false;
  std::variant<bool, int64_t, double, std::string, std::shared_ptr<ValueList>, std::shared_ptr<DictData>,
               std::shared_ptr<CallableData>, std::shared_ptr<LoopData>, std::shared_ptr<GeneratorData>>
      payload_;
};

// An insertion-ordered dict (Python 3.7+ dicts keep insertion order). Keys are usually strings;
// lookups are linear, which is fast for the small dicts that chat messages are.
struct DictData {
  std::vector<std::pair<Value, Value>> entries;

  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(const Value& key, Value value);
};

// The state behind a for loop's `loop` variable.
struct LoopData {
  std::shared_ptr<const ValueList> items;
  size_t index0 = 0;
  int depth = 1;
};

struct GeneratorData {
  ValueList items;
  size_t position = 0;  // items before it were consumed
};

struct CallArgs {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // Takes the argument at `position` or named `name` (jinja2 filter/method style signature);
  // returns nullptr when absent.
  const Value* get(size_t position, const std::string& name) const;
  // Fails when more positional arguments or unknown keywords were given than a callable takes.
  void expect_at_most(size_t positional_count, std::initializer_list<const char*> names,
                      const std::string& callee) const;
};

// Python semantics used all over the interpreter.
std::string python_type_name(const Value& v);
// jinja2's object_type_repr, as used in "... has no attribute ..." messages ("dict object").
std::string object_type_description(const Value& v);
bool truthy(const Value& v);
std::string to_str(const Value& v);   // str(v)
std::string to_repr(const Value& v);  // repr(v)
std::string float_repr(double d);     // repr(float)
bool values_equal(const Value& a, const Value& b);
// Python's a < b; raises for unorderable types.
bool value_less(const Value& a, const Value& b);
// len(v); raises for types without a length.
int64_t value_length(const Value& v);
// list(iter(v)): strings give characters, dicts their keys, undefined nothing; consumes generators.
ValueList iterate(const Value& v);

}  // namespace kestrel::chat
