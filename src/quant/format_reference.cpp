// Scalar reference kernels for F32, F16, BF16, Q8_0, Q4_0 and Q8_1, and the table of every weight
// format (k-quants and Kestrel's formats have their kernels in their own files).
#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/half.h"
#include "quant/blocks.h"
#include "quant/format.h"
#include "quant/reference_kernels.h"

#include "quant/no_fp_contract.h"  // last: no fused multiply-add in this file

namespace kestrel::quant {
namespace {

// Q8_0 and Q8_1 blocks share d and qs (Q8_1 adds s, unused here): one dequantize, one dot.
template <class Block>
void dequantize_q8_blocks(const Block* blocks, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQ8_0BlockSize; ++b) {
    const float d = fp16_to_float(blocks[b].d);
    for (int i = 0; i < kQ8_0BlockSize; ++i) dst[b * kQ8_0BlockSize + i] = d * float(blocks[b].qs[i]);
  }
}

template <class Block>
float dot_q8_blocks(const Block* x, const Block* y, int64_t n) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQ8_0BlockSize; ++b) {
    int32_t isum = 0;
    for (int i = 0; i < kQ8_0BlockSize; ++i) isum += int32_t(x[b].qs[i]) * int32_t(y[b].qs[i]);
    sum += float(isum) * fp16_to_float(x[b].d) * fp16_to_float(y[b].d);
  }
  return sum;
}

}  // namespace

namespace ref {

// Q8_1: as Q8_0 (d = amax / 127, q = round(x / d)), plus s = d * sum(q) in F16.
void quantize_row_q8_1(const float* src, void* dst, int64_t n) {
  BlockQ8_1* blocks = static_cast<BlockQ8_1*>(dst);
  for (int64_t b = 0; b < n / kQ8_0BlockSize; ++b) {
    const float* x = src + b * kQ8_0BlockSize;
    float amax = 0.0f;
    for (int i = 0; i < kQ8_0BlockSize; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int i = 0; i < kQ8_0BlockSize; ++i) {
      blocks[b].qs[i] = int8_t(std::clamp(round_nearest(x[i] * inverse), -127.0f, 127.0f));
      sum += blocks[b].qs[i];
    }
    blocks[b].d = float_to_fp16(d);
    blocks[b].s = float_to_fp16(d * float(sum));
  }
}

void dequantize_row_q8_1(const void* src, float* dst, int64_t n) {
  dequantize_q8_blocks(static_cast<const BlockQ8_1*>(src), dst, n);
}

float vec_dot_q8_1_q8_1(const void* w, const void* a, int64_t n) {
  return dot_q8_blocks(static_cast<const BlockQ8_1*>(w), static_cast<const BlockQ8_1*>(a), n);
}

}  // namespace ref

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
  dequantize_q8_blocks(static_cast<const BlockQ8_0*>(src), dst, n);
}
float vec_dot_q8_0_q8_0(const void* w, const void* a, int64_t n) {
  return dot_q8_blocks(static_cast<const BlockQ8_0*>(w), static_cast<const BlockQ8_0*>(a), n);
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

using namespace ref;  // NOLINT: the table below names every reference kernel

constexpr std::array<WeightFormat, 45> kFormats{{
    {DType::F32, 1, 4, quantize_row_f32, dequantize_row_f32, DType::F32, vec_dot_f32},
    {DType::F16, 1, 2, quantize_row_f16, dequantize_row_f16, DType::F16, vec_dot_f16},
    {DType::BF16, 1, 2, quantize_row_bf16, dequantize_row_bf16, DType::BF16, vec_dot_bf16},
    {DType::Q8_0, 32, 34, quantize_row_q8_0, dequantize_row_q8_0, DType::Q8_0, vec_dot_q8_0_q8_0},
    {DType::Q4_0, 32, 18, quantize_row_q4_0, dequantize_row_q4_0, DType::Q8_0, vec_dot_q4_0_q8_0},
    {DType::Q8_1, 32, 36, quantize_row_q8_1, dequantize_row_q8_1, DType::Q8_1, vec_dot_q8_1_q8_1},
    {DType::Q4_1, 32, 20, quantize_row_q4_1, dequantize_row_q4_1, DType::Q8_1, vec_dot_q4_1_q8_1},
    {DType::Q5_0, 32, 22, quantize_row_q5_0, dequantize_row_q5_0, DType::Q8_0, vec_dot_q5_0_q8_0, 0, quantize_row_q5_0_weighted},
    {DType::Q5_1, 32, 24, quantize_row_q5_1, dequantize_row_q5_1, DType::Q8_1, vec_dot_q5_1_q8_1},
    {DType::Q2_K, 256, 84, quantize_row_q2_K, dequantize_row_q2_K, DType::Q8_K, vec_dot_q2_K_q8_K, 0, quantize_row_q2_K_weighted},
    {DType::Q3_K, 256, 110, quantize_row_q3_K, dequantize_row_q3_K, DType::Q8_K, vec_dot_q3_K_q8_K, 0, quantize_row_q3_K_weighted},
    {DType::Q4_K, 256, 144, quantize_row_q4_K, dequantize_row_q4_K, DType::Q8_K, vec_dot_q4_K_q8_K, 0, quantize_row_q4_K_weighted},
    {DType::Q5_K, 256, 176, quantize_row_q5_K, dequantize_row_q5_K, DType::Q8_K, vec_dot_q5_K_q8_K, 0, quantize_row_q5_K_weighted},
    {DType::Q6_K, 256, 210, quantize_row_q6_K, dequantize_row_q6_K, DType::Q8_K, vec_dot_q6_K_q8_K, 0, quantize_row_q6_K_weighted},
    {DType::Q8_K, 256, 292, quantize_row_q8_K, dequantize_row_q8_K, DType::Q8_K, vec_dot_q8_K_q8_K},
    {DType::IQ4_NL, 32, 18, quantize_row_iq4_nl, dequantize_row_iq4_nl, DType::Q8_0, vec_dot_iq4_nl_q8_0, 0, quantize_row_iq4_nl_weighted},
    {DType::IQ4_XS, 256, 136, quantize_row_iq4_xs, dequantize_row_iq4_xs, DType::Q8_K, vec_dot_iq4_xs_q8_K, 0, quantize_row_iq4_xs_weighted},
    {DType::IQ2_XXS, 256, 66, quantize_row_iq2_xxs, dequantize_row_iq2_xxs, DType::Q8_K, vec_dot_iq2_xxs_q8_K, 0, quantize_row_iq2_xxs_weighted},
    {DType::IQ2_XS, 256, 74, quantize_row_iq2_xs, dequantize_row_iq2_xs, DType::Q8_K, vec_dot_iq2_xs_q8_K, 0, quantize_row_iq2_xs_weighted},
    {DType::IQ2_S, 256, 82, quantize_row_iq2_s, dequantize_row_iq2_s, DType::Q8_K, vec_dot_iq2_s_q8_K, 0, quantize_row_iq2_s_weighted},
    {DType::IQ1_S, 256, 50, quantize_row_iq1_s, dequantize_row_iq1_s, DType::Q8_K, vec_dot_iq1_s_q8_K, 0, quantize_row_iq1_s_weighted},
    {DType::IQ1_M, 256, 56, quantize_row_iq1_m, dequantize_row_iq1_m, DType::Q8_K, vec_dot_iq1_m_q8_K, 0, quantize_row_iq1_m_weighted},
    {DType::TQ1_0, 256, 54, quantize_row_tq1_0, dequantize_row_tq1_0, DType::Q8_K, vec_dot_tq1_0_q8_K},
    {DType::TQ2_0, 256, 66, quantize_row_tq2_0, dequantize_row_tq2_0, DType::Q8_K, vec_dot_tq2_0_q8_K},
    {DType::MXFP4, 32, 17, quantize_row_mxfp4, dequantize_row_mxfp4, DType::Q8_0, vec_dot_mxfp4_q8_0},
    {DType::IQ3_XXS, 256, 98, quantize_row_iq3_xxs, dequantize_row_iq3_xxs, DType::Q8_K, vec_dot_iq3_xxs_q8_K, 0, quantize_row_iq3_xxs_weighted},
    {DType::IQ3_S, 256, 110, quantize_row_iq3_s, dequantize_row_iq3_s, DType::Q8_K, vec_dot_iq3_s_q8_K, 0, quantize_row_iq3_s_weighted},
    {DType::INT8_PC, 32, 32, quantize_row_int8_pc, dequantize_row_int8_pc, DType::Q8_0,
     vec_dot_int8_pc_q8_0, kPerChannelHeaderBytes},
    {DType::W8A8, 32, 32, quantize_row_int8_pc, dequantize_row_int8_pc, DType::INT8_PC, vec_dot_int8_pc_int8_pc,
     kPerChannelHeaderBytes},
    {DType::INT4_SYM_G32, 32, 18, quantize_row_int4_sym<32>, dequantize_row_int4_sym<32>,
     DType::Q8_0, vec_dot_int4_sym_q8_0<32>},
    {DType::INT4_SYM_G64, 64, 34, quantize_row_int4_sym<64>, dequantize_row_int4_sym<64>,
     DType::Q8_0, vec_dot_int4_sym_q8_0<64>},
    {DType::INT4_SYM_G128, 128, 66, quantize_row_int4_sym<128>, dequantize_row_int4_sym<128>,
     DType::Q8_0, vec_dot_int4_sym_q8_0<128>},
    {DType::INT4_ASYM_G32, 32, 20, quantize_row_int_asym<32, 4>, dequantize_row_int_asym<32, 4>,
     DType::Q8_1, vec_dot_int_asym_q8_1<32, 4>},
    {DType::INT4_ASYM_G64, 64, 36, quantize_row_int_asym<64, 4>, dequantize_row_int_asym<64, 4>,
     DType::Q8_1, vec_dot_int_asym_q8_1<64, 4>},
    {DType::INT4_ASYM_G128, 128, 68, quantize_row_int_asym<128, 4>, dequantize_row_int_asym<128, 4>,
     DType::Q8_1, vec_dot_int_asym_q8_1<128, 4>},
    {DType::INT3_ASYM_G64, 64, 28, quantize_row_int_asym<64, 3>, dequantize_row_int_asym<64, 3>,
     DType::Q8_1, vec_dot_int_asym_q8_1<64, 3>},
    {DType::INT3_ASYM_G128, 128, 52, quantize_row_int_asym<128, 3>, dequantize_row_int_asym<128, 3>,
     DType::Q8_1, vec_dot_int_asym_q8_1<128, 3>},
    {DType::INT2_ASYM_G64, 64, 20, quantize_row_int_asym<64, 2>, dequantize_row_int_asym<64, 2>,
     DType::Q8_1, vec_dot_int_asym_q8_1<64, 2>},
    {DType::INT2_ASYM_G128, 128, 36, quantize_row_int_asym<128, 2>, dequantize_row_int_asym<128, 2>,
     DType::Q8_1, vec_dot_int_asym_q8_1<128, 2>},
    {DType::INT4_ZP_G32, 32, 20, quantize_row_int4_zp<32>, dequantize_row_int4_zp<32>, DType::Q8_1,
     vec_dot_int4_zp_q8_1<32>},
    {DType::INT4_ZP_G64, 64, 36, quantize_row_int4_zp<64>, dequantize_row_int4_zp<64>, DType::Q8_1,
     vec_dot_int4_zp_q8_1<64>},
    {DType::INT4_ZP_G128, 128, 68, quantize_row_int4_zp<128>, dequantize_row_int4_zp<128>, DType::Q8_1,
     vec_dot_int4_zp_q8_1<128>},
    {DType::NF4, 64, 34, quantize_row_nf4, dequantize_row_nf4, DType::Q8_0, vec_dot_nf4_q8_0, 0, quantize_row_nf4_weighted},
    {DType::IQ3_S_L4, 256, 134, quantize_row_iq3_s_l4, dequantize_row_iq3_s_l4, DType::Q8_K, vec_dot_iq3_s_l4_q8_K, 0,
     quantize_row_iq3_s_l4_weighted},
    {DType::FP8_E4M3_PC, 1, 1, quantize_row_fp8_e4m3_pc, dequantize_row_fp8_e4m3_pc, DType::F32,
     vec_dot_fp8_e4m3_pc_f32, kPerChannelHeaderBytes},
}};

}  // namespace

const WeightFormat* find_format(DType type) {
  for (const WeightFormat& format : kFormats) {
    if (format.type == type) return &format;
  }
  return nullptr;
}

std::span<const WeightFormat> all_formats() { return kFormats; }

const WeightFormat& require_format(DType type) {
  if (const WeightFormat* format = find_format(type)) return *format;
  std::string supported;
  for (const WeightFormat& format : kFormats) {
    if (!supported.empty()) supported += ", ";
    supported += dtype_name(format.type);
  }
  fail("weight type {} is not supported yet (supported: {})", dtype_name(type), supported);
}

}  // namespace kestrel::quant
