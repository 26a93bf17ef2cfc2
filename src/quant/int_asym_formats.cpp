// Kestrel's asymmetric per-group integer formats, INT4_ASYM_G*, INT3_ASYM_G* and INT2_ASYM_G*
// (layouts in quant/blocks.h): per group of G an F16 scale d = (max - min) / (2^Bits - 1) and F16
// min m, x = d q + m. They differ only in how the levels are packed (group_level in blocks.h):
// 4-bit levels as nibbles, 3- and 2-bit ones in strided bit planes. Dots with Q8_1, whose per-block sum s = d_a * sum(q_a) turns sum m * a into m * s.
// INT4_ZP_G* (GPTQ's, AWQ's and compressed-tensors' layout) is INT4_ASYM with the min written as an
// integer zero point, x = s (q - z): the same nibbles, and m = -s z, which is exact in F32.
// These are round-to-nearest over the group's range, the baseline the calibrated methods (GPTQ,
// AWQ) improve on by choosing their own levels and scales (calib/grid_format.cpp). Values are
// assigned against the scales as stored (after F16 rounding).
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

#include "core/half.h"
#include "quant/blocks.h"
#include "quant/reference_kernels.h"

#include "quant/no_fp_contract.h"  // last: no fused multiply-add in this file

namespace kestrel::quant::ref {
namespace {

// The block type of a (G, Bits) format; both keep the packed levels in `qs`.
template <int G, int Bits>
using AsymBlock = std::conditional_t<Bits == 4, BlockInt4Asym<G>, BlockIntLowBit<G, Bits>>;

// A group's scale d and min m (x = d q + m).
template <class Block>
std::pair<float, float> scale_and_min(const Block& b) {
  if constexpr (requires { b.scale_zero; }) {
    return zp_scale_and_min(b.scale_zero);
  } else {
    return {fp16_to_float(b.d), fp16_to_float(b.m)};
  }
}

template <int G, int Bits, class Block>
void dequantize_groups(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const Block*>(src);
  for (int64_t b = 0; b < n / G; ++b) {
    const auto [d, m] = scale_and_min(blocks[b]);
    for (int i = 0; i < G; ++i) dst[b * G + i] = d * float(group_level<G, Bits>(blocks[b].qs, i)) + m;
  }
}

template <int G, int Bits, class Block>
float vec_dot_groups_q8_1(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const Block*>(w);
  const BlockQ8_1* y = static_cast<const BlockQ8_1*>(a);
  constexpr int kSubBlocks = G / kQ8_0BlockSize;
  float sum = 0.0f;
  for (int64_t b = 0; b < n / G; ++b) {
    const auto [d, m] = scale_and_min(x[b]);
    for (int s = 0; s < kSubBlocks; ++s) {
      const BlockQ8_1& act = y[b * kSubBlocks + s];
      int32_t dot = 0;
      for (int i = 0; i < kQ8_0BlockSize; ++i) {
        dot += group_level<G, Bits>(x[b].qs, s * kQ8_0BlockSize + i) * int32_t(act.qs[i]);
      }
      // sum_i (d q_i + m) a_i = d * d_a * dot + m * s_a.
      sum += d * (fp16_to_float(act.d) * float(dot)) + m * fp16_to_float(act.s);
    }
  }
  return sum;
}

}  // namespace

template <int G, int Bits>
void quantize_row_int_asym(const float* src, void* dst, int64_t n) {
  constexpr float kMaxLevel = float((1 << Bits) - 1);
  auto* blocks = static_cast<AsymBlock<G, Bits>*>(dst);
  for (int64_t b = 0; b < n / G; ++b) {
    const float* x = src + b * G;
    float lo = x[0], hi = x[0];
    for (int i = 1; i < G; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    blocks[b].d = float_to_fp16((hi - lo) / kMaxLevel);
    blocks[b].m = float_to_fp16(lo);
    const float d = fp16_to_float(blocks[b].d);
    const float m = fp16_to_float(blocks[b].m);
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t levels[G];
    for (int i = 0; i < G; ++i) {
      levels[i] = uint8_t(std::clamp(round_nearest((x[i] - m) * inverse), 0.0f, kMaxLevel));
    }
    pack_group_levels<G, Bits>(levels, blocks[b].qs);
  }
}

template <int G, int Bits>
void dequantize_row_int_asym(const void* src, float* dst, int64_t n) {
  dequantize_groups<G, Bits, AsymBlock<G, Bits>>(src, dst, n);
}

template <int G, int Bits>
float vec_dot_int_asym_q8_1(const void* w, const void* a, int64_t n) {
  return vec_dot_groups_q8_1<G, Bits, AsymBlock<G, Bits>>(w, a, n);
}

// GPTQ's round-to-nearest (its Quantizer with sym=False): the range is widened to include 0, so
// the zero point is a level; s = F16((max - min) / 15), z = round(-min / s), q = round(x / s) + z.
template <int G>
void quantize_row_int4_zp(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockInt4Zp<G>*>(dst);
  for (int64_t b = 0; b < n / G; ++b) {
    const float* x = src + b * G;
    float lo = 0.0f, hi = 0.0f;
    for (int i = 0; i < G; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    const float s = fp16_to_float(float_to_fp16((hi - lo) / 15.0f));
    const float inverse = s != 0.0f ? 1.0f / s : 0.0f;
    const int z = int(std::clamp(round_nearest(-lo * inverse), 0.0f, 15.0f));
    zp_pack(s, z, &blocks[b].scale_zero);  // an F16 value always fits
    uint8_t levels[G];
    for (int i = 0; i < G; ++i) {
      levels[i] = uint8_t(std::clamp(round_nearest(x[i] * inverse) + float(z), 0.0f, 15.0f));
    }
    pack_group_levels<G, 4>(levels, blocks[b].qs);
  }
}

template <int G>
void dequantize_row_int4_zp(const void* src, float* dst, int64_t n) {
  dequantize_groups<G, 4, BlockInt4Zp<G>>(src, dst, n);
}

template <int G>
float vec_dot_int4_zp_q8_1(const void* w, const void* a, int64_t n) {
  return vec_dot_groups_q8_1<G, 4, BlockInt4Zp<G>>(w, a, n);
}

#define KESTREL_INSTANTIATE_INT_ASYM(G, Bits)                                          \
  template void quantize_row_int_asym<G, Bits>(const float*, void*, int64_t);          \
  template void dequantize_row_int_asym<G, Bits>(const void*, float*, int64_t);        \
  template float vec_dot_int_asym_q8_1<G, Bits>(const void*, const void*, int64_t);
KESTREL_INSTANTIATE_INT_ASYM(32, 4)
KESTREL_INSTANTIATE_INT_ASYM(64, 4)
KESTREL_INSTANTIATE_INT_ASYM(128, 4)
KESTREL_INSTANTIATE_INT_ASYM(64, 3)
KESTREL_INSTANTIATE_INT_ASYM(128, 3)
KESTREL_INSTANTIATE_INT_ASYM(64, 2)
KESTREL_INSTANTIATE_INT_ASYM(128, 2)
#undef KESTREL_INSTANTIATE_INT_ASYM
#define KESTREL_INSTANTIATE_INT4_ZP(G)                                         \
  template void quantize_row_int4_zp<G>(const float*, void*, int64_t);         \
  template void dequantize_row_int4_zp<G>(const void*, float*, int64_t);       \
  template float vec_dot_int4_zp_q8_1<G>(const void*, const void*, int64_t);
KESTREL_INSTANTIATE_INT4_ZP(32)
KESTREL_INSTANTIATE_INT4_ZP(64)
KESTREL_INSTANTIATE_INT4_ZP(128)
#undef KESTREL_INSTANTIATE_INT4_ZP

}  // namespace kestrel::quant::ref
