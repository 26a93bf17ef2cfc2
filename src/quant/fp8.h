// FP8 E4M3 as the OCP 8-bit floating point spec defines it ("E4M3FN"): 1 sign bit, 4 exponent bits
// with bias 7, 3 mantissa bits; no infinities; 0x7F and 0xFF are NaN, so the largest finite value
// is 1.75 * 2^8 = 448. Exponent field 0 holds subnormals m * 2^-9.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace kestrel::quant {

inline constexpr float kE4M3Max = 448.0f;

constexpr float e4m3_decode(uint8_t code) {
  const int exponent = (code >> 3) & 0x0f;
  const int mantissa = code & 0x07;
  if (exponent == 15 && mantissa == 7) return std::numeric_limits<float>::quiet_NaN();
  // Normal: (1 + m/8) * 2^(e - 7) = (8 + m) * 2^(e - 10); subnormal: m * 2^-9.
  const float magnitude =
      exponent == 0 ? float(mantissa) * 0x1p-9f
                    : float(8 + mantissa) * std::bit_cast<float>(uint32_t(exponent - 10 + 127) << 23);
  return (code & 0x80) != 0 ? -magnitude : magnitude;
}

constexpr std::array<float, 256> make_e4m3_table() {
  std::array<float, 256> table{};
  for (int code = 0; code < 256; ++code) table[std::size_t(code)] = e4m3_decode(uint8_t(code));
  return table;
}

// Decode table: kE4M3ToFloat[code] is the value of an E4M3 byte (what dot kernels look up).
inline constexpr std::array<float, 256> kE4M3ToFloat = make_e4m3_table();

// Nearest E4M3 value, ties to even; magnitudes from 448 up (and infinities) saturate to +-448,
// NaN becomes 0x7F (with the sign bit of the input).
uint8_t float_to_e4m3(float value);

}  // namespace kestrel::quant
