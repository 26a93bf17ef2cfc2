// GGUF metadata values: the 13 value types of the GGUF spec, arrays included (arrays may nest).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace kestrel::gguf {

enum class ValueType : uint32_t {
  UInt8 = 0,
  Int8 = 1,
  UInt16 = 2,
  Int16 = 3,
  UInt32 = 4,
  Int32 = 5,
  Float32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  UInt64 = 10,
  Int64 = 11,
  Float64 = 12,
};

const char* value_type_name(ValueType type);

struct Value;

struct Array {
  ValueType element_type = ValueType::UInt8;
  std::vector<Value> items;
};

struct Value {
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, Array, uint64_t, int64_t, double>;
  Storage storage;

  // The variant index equals the GGUF value type id.
  ValueType type() const { return ValueType(storage.index()); }

  // Conversions that succeed only when the stored type fits (any integer type for as_int, any
  // numeric type for as_float).
  std::optional<int64_t> as_int() const;
  std::optional<uint64_t> as_uint() const;
  std::optional<double> as_float() const;
  const std::string* as_string() const { return std::get_if<std::string>(&storage); }
  const Array* as_array() const { return std::get_if<Array>(&storage); }
  std::optional<bool> as_bool() const;

  static Value of_string(std::string s) { return Value{Storage(std::move(s))}; }
  static Value of_u32(uint32_t v) { return Value{Storage(v)}; }
  static Value of_i32(int32_t v) { return Value{Storage(v)}; }
  static Value of_u64(uint64_t v) { return Value{Storage(v)}; }
  static Value of_f32(float v) { return Value{Storage(v)}; }
  static Value of_bool(bool v) { return Value{Storage(v)}; }
  static Value of_array(ValueType element_type, std::vector<Value> items) {
    return Value{Storage(Array{element_type, std::move(items)})};
  }
};

// Short human-readable rendering (arrays abbreviated), for `kestrel info`.
std::string value_to_display_string(const Value& value, size_t max_items = 8);

}  // namespace kestrel::gguf
