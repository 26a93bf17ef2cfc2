// Tensor element types. The numeric values are GGML's (they are what GGUF files store), so a
// GGUF tensor type converts with a range check and nothing else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kestrel {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

// Storage layout of a type: `block_size` elements are stored in `block_bytes` bytes.
struct DTypeLayout {
  std::string_view name;
  int64_t block_size;
  int64_t block_bytes;
};

// Layout of a known type id, or nullopt for ids GGUF does not define (or that were removed).
std::optional<DTypeLayout> dtype_layout(uint32_t type_id);
DTypeLayout dtype_layout(DType type);
std::string_view dtype_name(DType type);
// Parses a type name such as "Q8_0" or "f16" (case-insensitive).
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes taken by a row of `n` elements; n must be a multiple of the block size.
inline int64_t dtype_row_bytes(DType type, int64_t n) {
  const DTypeLayout layout = dtype_layout(type);
  return n / layout.block_size * layout.block_bytes;
}

}  // namespace kestrel
