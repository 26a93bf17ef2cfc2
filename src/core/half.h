// IEEE half (F16) and bfloat16 (BF16) <-> float conversions, scalar and exact (round to nearest even).
// Kernels may use F16C/AVX-512 instructions instead; these are the references they are checked against.
#pragma once

#include <cstdint>
#include <cstring>

namespace kestrel {

inline float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    if (mantissa == 0) return bits_to_float(sign);
    // Subnormal half: renormalise into a normal float.
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3ffu;
    return bits_to_float(sign | uint32_t(127 - 15 - shift + 1) << 23 | mantissa << 13);
  }
  if (exponent == 31) return bits_to_float(sign | 0x7f800000u | mantissa << 13);  // inf / nan
  return bits_to_float(sign | (exponent + 127 - 15) << 23 | mantissa << 13);
}

inline uint16_t float_to_fp16(float f) {
  const uint32_t bits = float_to_bits(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return uint16_t(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: overflow to inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero) in half precision: value / 2^-24, rounded to nearest even.
    const float magnitude = bits_to_float(abs);
    const float scaled = magnitude * 16777216.0f;  // 2^24, exact
    uint32_t q = uint32_t(scaled);
    const float rest = scaled - float(q);
    if (rest > 0.5f || (rest == 0.5f && (q & 1u))) ++q;
    return uint16_t(sign | q);
  }
  // Normal: rebias exponent, round mantissa from 23 to 10 bits to nearest even.
  uint32_t rebased = abs - ((127u - 15u) << 23);
  const uint32_t round_bit = 1u << 12;
  const uint32_t lower = rebased & 0x1fffu;
  rebased >>= 13;
  if (lower > round_bit || (lower == round_bit && (rebased & 1u))) ++rebased;
  return uint16_t(sign | rebased);
}

inline float bf16_to_float(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t bits = float_to_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);  // quiet nan
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return uint16_t(bits >> 16);
}

}  // namespace kestrel
