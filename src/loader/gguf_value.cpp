#include "loader/gguf_value.h"

#include <fmt/format.h>

#include <type_traits>

namespace kestrel::gguf {

const char* value_type_name(ValueType type) {
  switch (type) {
    case ValueType::UInt8: return "uint8";
    case ValueType::Int8: return "int8";
    case ValueType::UInt16: return "uint16";
    case ValueType::Int16: return "int16";
    case ValueType::UInt32: return "uint32";
    case ValueType::Int32: return "int32";
    case ValueType::Float32: return "float32";
    case ValueType::Bool: return "bool";
    case ValueType::String: return "string";
    case ValueType::Array: return "array";
    case ValueType::UInt64: return "uint64";
    case ValueType::Int64: return "int64";
    case ValueType::Float64: return "float64";
  }
  return "unknown";
}

std::optional<int64_t> Value::as_int() const {
  return std::visit(
      [](const auto& v) -> std::optional<int64_t> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, uint64_t>) {
          if (v > uint64_t(INT64_MAX)) return std::nullopt;
          return int64_t(v);
        } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          return int64_t(v);
        } else {
          return std::nullopt;
        }
      },
      storage);
}

std::optional<uint64_t> Value::as_uint() const {
  return std::visit(
      [](const auto& v) -> std::optional<uint64_t> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if constexpr (std::is_signed_v<T>) {
            if (v < 0) return std::nullopt;
          }
          return uint64_t(v);
        } else {
          return std::nullopt;
        }
      },
      storage);
}

std::optional<double> Value::as_float() const {
  return std::visit(
      [](const auto& v) -> std::optional<double> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
          return double(v);
        } else {
          return std::nullopt;
        }
      },
      storage);
}

std::optional<bool> Value::as_bool() const {
  if (const bool* b = std::get_if<bool>(&storage)) return *b;
  return std::nullopt;
}

std::string value_to_display_string(const Value& value, size_t max_items) {
  return std::visit(
      [&](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (v.size() > 60) return fmt::format("\"{}...\" ({} bytes)", v.substr(0, 57), v.size());
          return fmt::format("\"{}\"", v);
        } else if constexpr (std::is_same_v<T, Array>) {
          std::string out = fmt::format("[{} x {}: ", v.items.size(), value_type_name(v.element_type));
          for (size_t i = 0; i < v.items.size() && i < max_items; ++i) {
            if (i > 0) out += ", ";
            out += value_to_display_string(v.items[i], 2);
          }
          if (v.items.size() > max_items) out += ", ...";
          return out + "]";
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t>) {
          return fmt::format("{}", int(v));
        } else {
          return fmt::format("{}", v);
        }
      },
      value.storage);
}

}  // namespace kestrel::gguf
