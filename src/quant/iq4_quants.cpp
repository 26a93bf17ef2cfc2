// llama.cpp's non-linear 4-bit formats IQ4_NL (blocks of 32, Q8_0 activations) and IQ4_XS
// (super-blocks of 256 with 6-bit sub-block scales, Q8_K activations): quantizers, dequantization
// (bitwise as ggml's dequantize_row_iq4_* and gguf-py: d * level, and (d * scale) * level, in
// float) and the dot products, whose integer sums are exact per block (IQ4_NL) or super-block
// (IQ4_XS), with one float product per block as in the other formats' references.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "quant/blocks.h"
#include "quant/reference_kernels.h"

#include "quant/no_fp_contract.h"  // last: no fused multiply-add in this file

namespace kestrel::quant::ref {
namespace {

constexpr int kGroup = 32;  // elements per scale: an IQ4_NL block, an IQ4_XS sub-block

// The index of the level nearest to v (ties to the larger level, as llama.cpp's
// best_index_int8), by bisection; 0 for NaN.
int nearest_index(float v) {
  if (!(v > float(kIQ4Levels[0]))) return 0;
  if (v >= float(kIQ4Levels[15])) return 15;
  int lo = 0, hi = 15;  // levels[lo] <= v < levels[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (v < float(kIQ4Levels[mid])) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return v - float(kIQ4Levels[lo]) < float(kIQ4Levels[hi]) - v ? lo : hi;
}

// The scale of one group of 32 values that minimises sum w_i (x_i - d level_i)^2 over the
// candidates tried: the value of largest magnitude mapped near either end of the levels (-127 or
// 113, each +-7 steps), the levels assigned by nearest rounding, d fitted by least squares.
// Returns 0 for a group of zeros.
float best_group_scale(const float* x, const float* w) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < kGroup; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < 1e-15f) return 0.0f;
  float best_d = 0.0f, best_gain = -1.0f;
  for (float end : {float(kIQ4Levels[0]), float(kIQ4Levels[15])}) {
    for (int step = -7; step <= 7; ++step) {
      const float inverse = (end + float(step)) / max;
      float sum_qx = 0.0f, sum_q2 = 0.0f;
      for (int i = 0; i < kGroup; ++i) {
        const float q = float(kIQ4Levels[nearest_index(inverse * x[i])]);
        sum_qx += w[i] * q * x[i];
        sum_q2 += w[i] * q * q;
      }
      if (sum_q2 <= 0.0f) continue;
      const float gain = sum_qx * sum_qx / sum_q2;  // the error is sum w x^2 - gain
      if (gain > best_gain) {
        best_gain = gain;
        best_d = sum_qx / sum_q2;
      }
    }
  }
  return best_d;
}

// Per-value weights of the fit: importance * sqrt(sigma2 + x^2) with an imatrix (sigma2 = twice
// the mean square of the n values around), else x^2 (llama.cpp's choices).
void fit_weights(const float* x, int n, const float* importance, float* w) {
  if (importance == nullptr) {
    for (int i = 0; i < n; ++i) w[i] = x[i] * x[i];
    return;
  }
  importance_weights(x, n, importance, w);
}

// The 16 index bytes of a group: each value's nearest level at the stored step d.
void pack_group(const float* x, float d, uint8_t* qs) {
  const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kGroup / 2; ++j) {
    qs[j] = uint8_t(nearest_index(x[j] * inverse) | nearest_index(x[j + kGroup / 2] * inverse) << 4);
  }
}

void quantize_iq4_nl(const float* src, void* dst, int64_t n, const float* importance) {
  BlockIQ4_NL* blocks = static_cast<BlockIQ4_NL*>(dst);
  float w[kGroup];
  for (int64_t b = 0; b < n / kGroup; ++b) {
    const float* x = src + b * kGroup;
    fit_weights(x, kGroup, importance != nullptr ? importance + b * kGroup : nullptr, w);
    blocks[b].d = float_to_fp16(best_group_scale(x, w));
    pack_group(x, fp16_to_float(blocks[b].d), blocks[b].qs);
  }
}

// IQ4_XS: each sub-block's best scale, then one F16 step d with the largest scale at code -32
// (the signed end of [-32, 31]), codes rounded to nearest, indices re-chosen at each stored step.
void quantize_iq4_xs(const float* src, void* dst, int64_t n, const float* importance) {
  BlockIQ4_XS* blocks = static_cast<BlockIQ4_XS*>(dst);
  constexpr int kSubBlocks = kQK_K / kGroup;
  float w[kQK_K];
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    BlockIQ4_XS& block = blocks[b];
    std::memset(&block, 0, sizeof block);
    fit_weights(x, kQK_K, importance != nullptr ? importance + b * kQK_K : nullptr, w);
    float scales[kSubBlocks];
    float max_scale = 0.0f;
    for (int j = 0; j < kSubBlocks; ++j) {
      scales[j] = best_group_scale(x + j * kGroup, w + j * kGroup);
      if (std::fabs(scales[j]) > std::fabs(max_scale)) max_scale = scales[j];
    }
    block.d = float_to_fp16(max_scale / -32.0f);
    const float d = fp16_to_float(block.d);
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kSubBlocks; ++j) {
      const int code = std::clamp(int(std::lround(scales[j] * inverse)), -32, 31) + 32;
      block.scales_l[j / 2] |= uint8_t((code & 0x0f) << (4 * (j % 2)));
      block.scales_h |= uint16_t((code >> 4) << (2 * j));
      pack_group(x + j * kGroup, d * float(code - 32), block.qs + j * kGroup / 2);
    }
  }
}

int level(const uint8_t* qs, int i) {  // the level of element i of a 32-element group
  return kIQ4Levels[i < kGroup / 2 ? qs[i] & 0x0f : qs[i - kGroup / 2] >> 4];
}

}  // namespace

void quantize_row_iq4_nl(const float* src, void* dst, int64_t n) { quantize_iq4_nl(src, dst, n, nullptr); }
void quantize_row_iq4_nl_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_iq4_nl(src, dst, n, importance);
}
void quantize_row_iq4_xs(const float* src, void* dst, int64_t n) { quantize_iq4_xs(src, dst, n, nullptr); }
void quantize_row_iq4_xs_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_iq4_xs(src, dst, n, importance);
}

void dequantize_row_iq4_nl(const void* src, float* dst, int64_t n) {
  const BlockIQ4_NL* blocks = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t b = 0; b < n / kGroup; ++b) {
    const float d = fp16_to_float(blocks[b].d);
    for (int i = 0; i < kGroup; ++i) dst[b * kGroup + i] = d * float(level(blocks[b].qs, i));
  }
}

void dequantize_row_iq4_xs(const void* src, float* dst, int64_t n) {
  const BlockIQ4_XS* blocks = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = fp16_to_float(blocks[b].d);
    for (int j = 0; j < kQK_K / kGroup; ++j) {
      const float step = d * float(iq4xs_scale(blocks[b], j));
      const uint8_t* qs = blocks[b].qs + j * kGroup / 2;
      for (int i = 0; i < kGroup; ++i) dst[b * kQK_K + j * kGroup + i] = step * float(level(qs, i));
    }
  }
}

float vec_dot_iq4_nl_q8_0(const void* w, const void* a, int64_t n) {
  const BlockIQ4_NL* x = static_cast<const BlockIQ4_NL*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kGroup; ++b) {
    int32_t dot = 0;
    for (int i = 0; i < kGroup; ++i) dot += level(x[b].qs, i) * int32_t(y[b].qs[i]);
    sum += float(dot) * fp16_to_float(x[b].d) * fp16_to_float(y[b].d);
  }
  return sum;
}

// Per super-block sum_j (ls_j - 32) * dot_j is an exact integer (|.| < 2^28).
float vec_dot_iq4_xs_q8_K(const void* w, const void* a, int64_t n) {
  const BlockIQ4_XS* x = static_cast<const BlockIQ4_XS*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int32_t scaled = 0;
    for (int j = 0; j < kQK_K / kGroup; ++j) {
      int32_t dot = 0;
      const uint8_t* qs = x[b].qs + j * kGroup / 2;
      for (int i = 0; i < kGroup; ++i) dot += level(qs, i) * int32_t(y[b].qs[j * kGroup + i]);
      scaled += iq4xs_scale(x[b], j) * dot;
    }
    sum += y[b].d * (fp16_to_float(x[b].d) * float(scaled));
  }
  return sum;
}

}  // namespace kestrel::quant::ref
