// Random valid rows of llama.cpp's grid formats (IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M), for the
// tests of formats Kestrel cannot quantize to (their quantize_row is null): every byte random
// (grid indices, signs, scales, deltas) except each super-block's F16 d, drawn finite and nonzero
// with the given scale (IQ1_M keeps d's bits in the top nibbles of its four scale words).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"

namespace kestrel::test {

inline bool is_iq_grid_format(DType type) {
  return type == DType::IQ2_XXS || type == DType::IQ2_XS || type == DType::IQ2_S || type == DType::IQ1_S ||
         type == DType::IQ1_M;
}

// One row of n elements (n a multiple of 256) written to `out` (dtype_row_bytes(type, n) bytes).
inline void random_iq_grid_row(DType type, int64_t n, float scale, std::mt19937& rng, uint8_t* out) {
  const DTypeLayout layout = dtype_layout(type);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> magnitude(0.5f, 2.0f);
  for (int64_t b = 0; b < n / layout.block_size; ++b) {
    uint8_t* block = out + b * layout.block_bytes;
    for (int64_t i = 0; i < layout.block_bytes; ++i) block[i] = uint8_t(byte(rng));
    const float d = (rng() & 1u ? -1.0f : 1.0f) * scale * magnitude(rng);
    const uint16_t bits = float_to_fp16(d);
    if (type != DType::IQ1_M) {
      std::memcpy(block, &bits, 2);
      continue;
    }
    for (int w = 0; w < 4; ++w) {  // scale words at bytes 48 + 2w
      uint16_t word;
      std::memcpy(&word, block + 48 + 2 * w, 2);
      word = uint16_t((word & 0x0fff) | ((bits >> (4 * w)) & 15) << 12);
      std::memcpy(block + 48 + 2 * w, &word, 2);
    }
  }
}

inline std::vector<uint8_t> random_iq_grid_rows(DType type, int64_t rows, int64_t n, float scale,
                                                std::mt19937& rng) {
  const int64_t row_bytes = dtype_row_bytes(type, n);
  std::vector<uint8_t> bytes(size_t(rows * row_bytes));
  for (int64_t r = 0; r < rows; ++r) random_iq_grid_row(type, n, scale, rng, bytes.data() + r * row_bytes);
  return bytes;
}

}  // namespace kestrel::test
