// Kestrel's integer weight formats (ids in core/dtype.h, blocks in quant/blocks.h):
//   INT8_PC        per-row F32 scale = amax / 127, q = round(x / scale); dots with Q8_0.
//   W8A8           INT8_PC's rows, dotted with activations in INT8_PC's layout (per-token int8).
//   INT4_SYM_G*    per group of G an F16 scale d = extreme / -8 (the value of largest magnitude
//                  lands on -8, so all 16 levels are used), x = d (q - 8); dots with Q8_0.
// The asymmetric INT4/INT3/INT2 group formats are in int_asym_formats.cpp.
// These are plain round-to-nearest quantizers: the quantization toolkit (GPTQ, AWQ) will choose
// its own scales and levels and only needs the layouts and the kernels here. Values are assigned
// against the scales as stored (after F16 rounding), so each lands on its nearest stored level.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "quant/blocks.h"
#include "quant/reference_kernels.h"

#include "quant/no_fp_contract.h"  // last: no fused multiply-add in this file

namespace kestrel::quant::ref {

// ---------------------------------------------------------------------------------------------
// INT8_PC

void quantize_row_int8_pc(const float* src, void* dst, int64_t n) {
  uint8_t* row = static_cast<uint8_t*>(dst);
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(src[i]));
  const float scale = amax / 127.0f;
  const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
  std::memcpy(row, &scale, sizeof scale);
  int8_t* q = reinterpret_cast<int8_t*>(row + kPerChannelHeaderBytes);
  for (int64_t i = 0; i < n; ++i) {
    q[i] = int8_t(std::clamp(round_nearest(src[i] * inverse), -127.0f, 127.0f));
  }
}

void dequantize_row_int8_pc(const void* src, float* dst, int64_t n) {
  const uint8_t* row = static_cast<const uint8_t*>(src);
  float scale;
  std::memcpy(&scale, row, sizeof scale);
  const int8_t* q = reinterpret_cast<const int8_t*>(row + kPerChannelHeaderBytes);
  for (int64_t i = 0; i < n; ++i) dst[i] = scale * float(q[i]);
}

float vec_dot_int8_pc_q8_0(const void* w, const void* a, int64_t n) {
  const uint8_t* row = static_cast<const uint8_t*>(w);
  float scale;
  std::memcpy(&scale, row, sizeof scale);
  const int8_t* q = reinterpret_cast<const int8_t*>(row + kPerChannelHeaderBytes);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQ8_0BlockSize; ++b) {
    int32_t dot = 0;
    for (int i = 0; i < kQ8_0BlockSize; ++i) dot += int32_t(q[b * kQ8_0BlockSize + i]) * y[b].qs[i];
    sum += fp16_to_float(y[b].d) * float(dot);
  }
  return scale * sum;
}

// W8A8: both rows are an F32 scale and int8 values; one exact integer sum (|sum| < 127^2 n, which
// fits int32 for n < 133,000), then two float products.
float vec_dot_int8_pc_int8_pc(const void* w, const void* a, int64_t n) {
  const uint8_t* w_row = static_cast<const uint8_t*>(w);
  const uint8_t* a_row = static_cast<const uint8_t*>(a);
  float w_scale, a_scale;
  std::memcpy(&w_scale, w_row, sizeof w_scale);
  std::memcpy(&a_scale, a_row, sizeof a_scale);
  const int8_t* qw = reinterpret_cast<const int8_t*>(w_row + kPerChannelHeaderBytes);
  const int8_t* qa = reinterpret_cast<const int8_t*>(a_row + kPerChannelHeaderBytes);
  int32_t dot = 0;
  for (int64_t i = 0; i < n; ++i) dot += int32_t(qw[i]) * int32_t(qa[i]);
  return w_scale * (a_scale * float(dot));
}

// ---------------------------------------------------------------------------------------------
// INT4, symmetric

template <int G>
void quantize_row_int4_sym(const float* src, void* dst, int64_t n) {
  BlockInt4Sym<G>* blocks = static_cast<BlockInt4Sym<G>*>(dst);
  for (int64_t b = 0; b < n / G; ++b) {
    const float* x = src + b * G;
    float extreme = 0.0f;
    for (int i = 0; i < G; ++i) {
      if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
    }
    blocks[b].d = float_to_fp16(extreme / -8.0f);
    const float d = fp16_to_float(blocks[b].d);
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t levels[G];
    for (int i = 0; i < G; ++i) {
      levels[i] = uint8_t(std::clamp(round_nearest(x[i] * inverse), -8.0f, 7.0f) + 8.0f);
    }
    pack_group_levels<G, 4>(levels, blocks[b].qs);
  }
}

template <int G>
void dequantize_row_int4_sym(const void* src, float* dst, int64_t n) {
  const BlockInt4Sym<G>* blocks = static_cast<const BlockInt4Sym<G>*>(src);
  for (int64_t b = 0; b < n / G; ++b) {
    const float d = fp16_to_float(blocks[b].d);
    for (int i = 0; i < G; ++i) dst[b * G + i] = d * float(group_level<G, 4>(blocks[b].qs, i) - 8);
  }
}

template <int G>
float vec_dot_int4_sym_q8_0(const void* w, const void* a, int64_t n) {
  const BlockInt4Sym<G>* x = static_cast<const BlockInt4Sym<G>*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(a);
  constexpr int kSubBlocks = G / kQ8_0BlockSize;
  float sum = 0.0f;
  for (int64_t b = 0; b < n / G; ++b) {
    float group = 0.0f;
    for (int s = 0; s < kSubBlocks; ++s) {
      const BlockQ8_0& act = y[b * kSubBlocks + s];
      int32_t dot = 0;
      for (int i = 0; i < kQ8_0BlockSize; ++i) {
        dot += (group_level<G, 4>(x[b].qs, s * kQ8_0BlockSize + i) - 8) * int32_t(act.qs[i]);
      }
      group += fp16_to_float(act.d) * float(dot);
    }
    sum += fp16_to_float(x[b].d) * group;
  }
  return sum;
}

#define KESTREL_INSTANTIATE_INT4(G)                                             \
  template void quantize_row_int4_sym<G>(const float*, void*, int64_t);         \
  template void dequantize_row_int4_sym<G>(const void*, float*, int64_t);       \
  template float vec_dot_int4_sym_q8_0<G>(const void*, const void*, int64_t);
KESTREL_INSTANTIATE_INT4(32)
KESTREL_INSTANTIATE_INT4(64)
KESTREL_INSTANTIATE_INT4(128)
#undef KESTREL_INSTANTIATE_INT4

}  // namespace kestrel::quant::ref
