// Valid weight codes that a format's quantizer never writes, for the kernel tests: TQ1_0 bytes
// above 242 (still 5 trits each), TQ2_0's code 3 (level 2), MXFP4's -0 nibble, MXFP4's subnormal
// scales (e = 0, 1) beside 2 and a large 200 (larger ones overflow a dot product), and IQ3_S_L4
// levels and scale codes beyond those IQ3_S's quantizer picks.
#pragma once

#include <cstdint>
#include <random>

#include "quant/format.h"

namespace kestrel::test {

// Makes every byte of each block of a quantized row random except its scale (TQ: the F16 d, the
// last two bytes; MXFP4: the exponent, the first byte; INT4_ZP: the scale's bits, but its zero
// point byte too; IQ3_S_L4: the F16 d), and sets every third MXFP4 exponent to an edge value. Other formats are left
// as they are.
inline void randomize_codes(const quant::WeightFormat& format, uint8_t* row, int64_t cols, std::mt19937& rng) {
  if (format.type == DType::INT4_ZP_G32 || format.type == DType::INT4_ZP_G64 || format.type == DType::INT4_ZP_G128) {
    // Any zero point byte (the quantizer writes 0..15) and any nibbles.
    for (int64_t b = 0; b < cols / format.block_size; ++b) {
      uint8_t* block = row + b * format.block_bytes;
      block[0] = uint8_t(rng());
      for (int64_t i = 4; i < format.block_bytes; ++i) block[i] = uint8_t(rng());
    }
    return;
  }
  if (format.type == DType::IQ3_S_L4) {
    // Every level and scale code (the quantizer may not reach them all); d kept.
    for (int64_t b = 0; b < cols / format.block_size; ++b) {
      uint8_t* block = row + b * format.block_bytes;
      for (int64_t i = 2; i < format.block_bytes; ++i) block[i] = uint8_t(rng());
    }
    return;
  }
  const bool ternary = format.type == DType::TQ1_0 || format.type == DType::TQ2_0;
  if (!ternary && format.type != DType::MXFP4) return;
  const int64_t scale_begin = ternary ? format.block_bytes - 2 : 0, scale_end = ternary ? format.block_bytes : 1;
  constexpr uint8_t kEdgeExponents[4] = {0, 1, 2, 200};
  for (int64_t b = 0; b < cols / format.block_size; ++b) {
    uint8_t* block = row + b * format.block_bytes;
    for (int64_t i = 0; i < format.block_bytes; ++i) {
      if (i < scale_begin || i >= scale_end) block[i] = uint8_t(rng());
    }
    if (!ternary && b % 3 == 0) block[0] = kEdgeExponents[(b / 3) % 4];
  }
}

}  // namespace kestrel::test
