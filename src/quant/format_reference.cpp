// Scalar reference kernels for F32, F16, BF16, Q8_0 and Q4_0.
#include <algorithm>
#include <array>
#include <cmath>

#include "core/error.h"
#include "core/half.h"
#include "quant/blocks.h"
#include "quant/format.h"

namespace kestrel::quant {
namespace {

void quantize_row_f32(const float* src, void* dst, int64_t n) {
  std::copy(src, src + n, static_cast<float*>(dst));
}
void dequantize_row_f32(const void* src, float* dst, int64_t n) {
  const float* s = static_cast<const float*>(src);
  std::copy(s, s + n, dst);
}
float vec_dot_f32(const void* w, const void* a, int64_t n) {
  const float* x = static_cast<const float*>(w);
  const float* y = static_cast<const float*>(a);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

void quantize_row_f16(const float* src, void* dst, int64_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = float_to_fp16(src[i]);
}
void dequantize_row_f16(const void* src, float* dst, int64_t n) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_float(s[i]);
}
float vec_dot_f16(const void* w, const void* a, int64_t n) {
  const uint16_t* x = static_cast<const uint16_t*>(w);
  const uint16_t* y = static_cast<const uint16_t*>(a);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += fp16_to_float(x[i]) * fp16_to_float(y[i]);
  return sum;
}

void quantize_row_bf16(const float* src, void* dst, int64_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
}
void dequantize_row_bf16(const void* src, float* dst, int64_t n) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
}
float vec_dot_bf16(const void* w, const void* a, int64_t n) {
  const uint16_t* x = static_cast<const uint16_t*>(w);
  const uint16_t* y = static_cast<const uint16_t*>(a);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += bf16_to_float(x[i]) * bf16_to_float(y[i]);
  return sum;
}

// Q8_0: scale so the largest magnitude maps to 127, round to nearest.
void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
  BlockQ8_0* blocks = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQ8_0BlockSize; ++b) {
    const float* x = src + b * kQ8_0BlockSize;
    float amax = 0.0f;
    for (int i = 0; i < kQ8_0BlockSize; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = float_to_fp16(d);
    for (int i = 0; i < kQ8_0BlockSize; ++i) blocks[b].qs[i] = int8_t(std::lround(x[i] * inverse));
  }
}
void dequantize_row_q8_0(const void* src, float* dst, int64_t n) {
  const BlockQ8_0* blocks = static_cast<const BlockQ8_0*>(src);
  for (int64_t b = 0; b < n / kQ8_0BlockSize; ++b) {
    const float d = fp16_to_float(blocks[b].d);
    for (int i = 0; i < kQ8_0BlockSize; ++i) dst[b * kQ8_0BlockSize + i] = d * float(blocks[b].qs[i]);
  }
}
float vec_dot_q8_0_q8_0(const void* w, const void* a, int64_t n) {
  const BlockQ8_0* x = static_cast<const BlockQ8_0*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQ8_0BlockSize; ++b) {
    int32_t isum = 0;
    for (int i = 0; i < kQ8_0BlockSize; ++i) isum += int32_t(x[b].qs[i]) * int32_t(y[b].qs[i]);
    sum += float(isum) * fp16_to_float(x[b].d) * fp16_to_float(y[b].d);
  }
  return sum;
}

// Q4_0: the signed value of largest magnitude maps to -8, so the full range [-8, 7] is used.
void quantize_row_q4_0(const float* src, void* dst, int64_t n) {
  BlockQ4_0* blocks = static_cast<BlockQ4_0*>(dst);
  for (int64_t b = 0; b < n / kQ4_0BlockSize; ++b) {
    const float* x = src + b * kQ4_0BlockSize;
    float amax = 0.0f;
    float extreme = 0.0f;
    for (int i = 0; i < kQ4_0BlockSize; ++i) {
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        extreme = x[i];
      }
    }
    const float d = extreme / -8.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = float_to_fp16(d);
    for (int j = 0; j < kQ4_0BlockSize / 2; ++j) {
      const int lo = std::min(15, int(x[j] * inverse + 8.5f));
      const int hi = std::min(15, int(x[j + kQ4_0BlockSize / 2] * inverse + 8.5f));
      blocks[b].qs[j] = uint8_t(lo | (hi << 4));
    }
  }
}
void dequantize_row_q4_0(const void* src, float* dst, int64_t n) {
  const BlockQ4_0* blocks = static_cast<const BlockQ4_0*>(src);
  for (int64_t b = 0; b < n / kQ4_0BlockSize; ++b) {
    const float d = fp16_to_float(blocks[b].d);
    float* out = dst + b * kQ4_0BlockSize;
    for (int j = 0; j < kQ4_0BlockSize / 2; ++j) {
      out[j] = d * float((blocks[b].qs[j] & 0x0f) - 8);
      out[j + kQ4_0BlockSize / 2] = d * float((blocks[b].qs[j] >> 4) - 8);
    }
  }
}
float vec_dot_q4_0_q8_0(const void* w, const void* a, int64_t n) {
  const BlockQ4_0* x = static_cast<const BlockQ4_0*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQ4_0BlockSize; ++b) {
    int32_t isum = 0;
    for (int j = 0; j < kQ4_0BlockSize / 2; ++j) {
      isum += ((x[b].qs[j] & 0x0f) - 8) * int32_t(y[b].qs[j]);
      isum += ((x[b].qs[j] >> 4) - 8) * int32_t(y[b].qs[j + kQ4_0BlockSize / 2]);
    }
    sum += float(isum) * fp16_to_float(x[b].d) * fp16_to_float(y[b].d);
  }
  return sum;
}

constexpr std::array<WeightFormat, 5> kFormats{{
    {DType::F32, 1, 4, quantize_row_f32, dequantize_row_f32, DType::F32, vec_dot_f32},
    {DType::F16, 1, 2, quantize_row_f16, dequantize_row_f16, DType::F16, vec_dot_f16},
    {DType::BF16, 1, 2, quantize_row_bf16, dequantize_row_bf16, DType::BF16, vec_dot_bf16},
    {DType::Q8_0, 32, 34, quantize_row_q8_0, dequantize_row_q8_0, DType::Q8_0, vec_dot_q8_0_q8_0},
    {DType::Q4_0, 32, 18, quantize_row_q4_0, dequantize_row_q4_0, DType::Q8_0, vec_dot_q4_0_q8_0},
}};

}  // namespace

const WeightFormat* find_format(DType type) {
  for (const WeightFormat& format : kFormats) {
    if (format.type == type) return &format;
  }
  return nullptr;
}

const WeightFormat& require_format(DType type) {
  if (const WeightFormat* format = find_format(type)) return *format;
  fail("weight type {} is not supported yet (supported: F32, F16, BF16, Q8_0, Q4_0)",
       dtype_name(type));
}

}  // namespace kestrel::quant
