// Block layouts of the quantized weight formats, byte-compatible with GGUF/GGML files.
#pragma once

#include <cstdint>

namespace kestrel::quant {

inline constexpr int kQ8_0BlockSize = 32;
inline constexpr int kQ4_0BlockSize = 32;

// Q8_0: 32 signed bytes and one F16 scale; x[i] = d * qs[i].
struct BlockQ8_0 {
  uint16_t d;  // F16 bits
  int8_t qs[kQ8_0BlockSize];
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q4_0: 32 4-bit values and one F16 scale; x[i] = d * (q[i] - 8). Byte j holds element j in its
// low nibble and element j + 16 in its high nibble.
struct BlockQ4_0 {
  uint16_t d;  // F16 bits
  uint8_t qs[kQ4_0BlockSize / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

}  // namespace kestrel::quant
