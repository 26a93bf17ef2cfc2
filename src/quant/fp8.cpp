// FP8 E4M3 encoding and the FP8_E4M3_PC weight format: each row is an F32 scale (amax / 448, so
// the row's largest magnitude lands on E4M3's largest value) followed by one E4M3 byte per
// element; x = scale * e4m3(q). Activations stay F32 and the dot product looks codes up in the
// 256-entry decode table.
#include "quant/fp8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/reference_kernels.h"

#include "quant/no_fp_contract.h"  // last: no fused multiply-add in this file

namespace kestrel::quant {

uint8_t float_to_e4m3(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  if (std::isnan(value)) return sign | 0x7f;
  const float magnitude = std::fabs(value);
  if (magnitude >= kE4M3Max) return sign | 0x7e;
  if (magnitude < 0x1p-6f) {
    // Subnormal range: multiples of 2^-9. A result of 8 is code 0x08, the smallest normal 2^-6.
    return uint8_t(sign | int(ref::round_nearest(magnitude * 512.0f)));
  }
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude in [2^(exponent-1), 2^exponent)
  const int unbiased = exponent - 1;
  // In units of this binade's mantissa step the value lies in [8, 16); rounding to 16 carries
  // into the next exponent, which adding (rounded - 8) to the binade's first code does by itself.
  const int rounded = int(ref::round_nearest(std::ldexp(magnitude, 3 - unbiased)));
  return uint8_t(sign | (((unbiased + 7) << 3) + (rounded - 8)));
}

namespace ref {
namespace {

float read_scale(const uint8_t* row) {
  float scale;
  std::memcpy(&scale, row, sizeof scale);
  return scale;
}

}  // namespace

void quantize_row_fp8_e4m3_pc(const float* src, void* dst, int64_t n) {
  uint8_t* row = static_cast<uint8_t*>(dst);
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(src[i]));
  const float scale = amax / kE4M3Max;
  const float inverse = amax != 0.0f ? kE4M3Max / amax : 0.0f;
  std::memcpy(row, &scale, sizeof scale);
  uint8_t* codes = row + kPerChannelHeaderBytes;
  for (int64_t i = 0; i < n; ++i) codes[i] = float_to_e4m3(src[i] * inverse);
}

void dequantize_row_fp8_e4m3_pc(const void* src, float* dst, int64_t n) {
  const uint8_t* row = static_cast<const uint8_t*>(src);
  const float scale = read_scale(row);
  const uint8_t* codes = row + kPerChannelHeaderBytes;
  for (int64_t i = 0; i < n; ++i) dst[i] = scale * kE4M3ToFloat[codes[i]];
}

float vec_dot_fp8_e4m3_pc_f32(const void* w, const void* a, int64_t n) {
  const uint8_t* row = static_cast<const uint8_t*>(w);
  const uint8_t* codes = row + kPerChannelHeaderBytes;
  const float* y = static_cast<const float*>(a);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += kE4M3ToFloat[codes[i]] * y[i];
  return read_scale(row) * sum;
}

}  // namespace ref
}  // namespace kestrel::quant
