// k-quants: dequantization and dot products with Q8_K activations (the scalar references the SIMD
// kernels are checked against), and the Q8_K activation quantizer. Dequantization follows GGML's
// arithmetic step for step ((d * scale) * q - dmin * min, in float), so it is bitwise equal to
// ggml and to gguf-py's dequantizers.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "quant/blocks.h"
#include "quant/reference_kernels.h"

#include "quant/no_fp_contract.h"  // last: no fused multiply-add in this file

namespace kestrel::quant::ref {
namespace {

// The 4-bit (Q4_K) or 5-bit (Q5_K) level of value i (0..255) of a block.
int q4_level(const BlockQ4_K& b, int i) {
  const int chunk = i / 64, l = i % 64;
  const uint8_t byte = b.qs[chunk * 32 + l % 32];
  return l < 32 ? byte & 0x0f : byte >> 4;
}

int q5_level(const BlockQ5_K& b, int i) {
  const int chunk = i / 64, l = i % 64;
  const uint8_t byte = b.qs[chunk * 32 + l % 32];
  const int low = l < 32 ? byte & 0x0f : byte >> 4;
  const int bit = 2 * chunk + (l < 32 ? 0 : 1);
  return low | ((b.qh[l % 32] >> bit) & 1) << 4;
}

// The signed level (q - 32, in [-32, 31]) of value i of a Q6_K block.
int q6_level(const BlockQ6_K& b, int i) {
  const int half = i / 128, l = i % 128;
  const int quarter = l / 32, pos = l % 32;
  const uint8_t low_byte = b.ql[half * 64 + (quarter % 2) * 32 + pos];
  const int low = quarter < 2 ? low_byte & 0x0f : low_byte >> 4;
  const int high = (b.qh[half * 32 + pos] >> (2 * quarter)) & 3;
  return (low | high << 4) - 32;
}

// Shared shape of the Q4_K/Q5_K kernels: Level(block, i) gives the unsigned level of value i.
template <typename Block, typename Level>
void dequantize_affine(const Block* blocks, float* dst, int64_t n, Level level) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const Block& block = blocks[b];
    const float d = fp16_to_float(block.d);
    const float dmin = fp16_to_float(block.dmin);
    for (int j = 0; j < kQK_K / 32; ++j) {
      uint8_t sc, m;
      kquant_scale_min(block.scales, j, &sc, &m);
      const float step = d * float(sc);
      const float min = dmin * float(m);
      for (int i = j * 32; i < j * 32 + 32; ++i) {
        dst[b * kQK_K + i] = step * float(level(block, i)) - min;
      }
    }
  }
}

// sum_j scale_j * sum_i q_i y_i and sum_j min_j * sum_i y_i are exact integers per super-block
// (the second from Q8_K's bsums); only the final scaling is in float.
template <typename Block, typename Level>
float dot_affine(const Block* x, const BlockQ8_K* y, int64_t n, Level level) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int32_t scaled = 0, mins = 0;
    for (int j = 0; j < kQK_K / 32; ++j) {
      uint8_t sc, m;
      kquant_scale_min(x[b].scales, j, &sc, &m);
      int32_t dot = 0;
      for (int i = j * 32; i < j * 32 + 32; ++i) dot += level(x[b], i) * int32_t(y[b].qs[i]);
      scaled += int32_t(sc) * dot;
      mins += int32_t(m) * (int32_t(y[b].bsums[2 * j]) + int32_t(y[b].bsums[2 * j + 1]));
    }
    sum += y[b].d * (fp16_to_float(x[b].d) * float(scaled) - fp16_to_float(x[b].dmin) * float(mins));
  }
  return sum;
}

// Shared shape of the Q6_K/Q3_K dots: 16 groups of 16 signed levels, each group with an integer
// scale; the integer sums are exact, one float product per super-block.
template <typename Block, typename Level, typename Scale>
float dot_symmetric(const Block* x, const BlockQ8_K* y, int64_t n, Level level, Scale scale) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int32_t scaled = 0;
    for (int j = 0; j < kQK_K / 16; ++j) {
      int32_t dot = 0;
      for (int i = j * 16; i < j * 16 + 16; ++i) dot += level(x[b], i) * int32_t(y[b].qs[i]);
      scaled += scale(x[b], j) * dot;
    }
    sum += y[b].d * (fp16_to_float(x[b].d) * float(scaled));
  }
  return sum;
}

}  // namespace

void dequantize_row_q4_K(const void* src, float* dst, int64_t n) {
  dequantize_affine(static_cast<const BlockQ4_K*>(src), dst, n, q4_level);
}

void dequantize_row_q5_K(const void* src, float* dst, int64_t n) {
  dequantize_affine(static_cast<const BlockQ5_K*>(src), dst, n, q5_level);
}

void dequantize_row_q6_K(const void* src, float* dst, int64_t n) {
  const BlockQ6_K* blocks = static_cast<const BlockQ6_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = fp16_to_float(blocks[b].d);
    for (int i = 0; i < kQK_K; ++i) {
      const float step = d * float(blocks[b].scales[i / 16]);
      dst[b * kQK_K + i] = step * float(q6_level(blocks[b], i));
    }
  }
}

float vec_dot_q4_K_q8_K(const void* w, const void* a, int64_t n) {
  return dot_affine(static_cast<const BlockQ4_K*>(w), static_cast<const BlockQ8_K*>(a), n,
                    q4_level);
}

float vec_dot_q5_K_q8_K(const void* w, const void* a, int64_t n) {
  return dot_affine(static_cast<const BlockQ5_K*>(w), static_cast<const BlockQ8_K*>(a), n,
                    q5_level);
}

float vec_dot_q6_K_q8_K(const void* w, const void* a, int64_t n) {
  return dot_symmetric(static_cast<const BlockQ6_K*>(w), static_cast<const BlockQ8_K*>(a), n, q6_level,
                       [](const BlockQ6_K& b, int j) { return int32_t(b.scales[j]); });
}

// Q2_K: (d * scale) * q - dmin * min in float, as ggml's dequantize_row_q2_K.
void dequantize_row_q2_K(const void* src, float* dst, int64_t n) {
  const BlockQ2_K* blocks = static_cast<const BlockQ2_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = fp16_to_float(blocks[b].d), dmin = fp16_to_float(blocks[b].dmin);
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float step = d * float(blocks[b].scales[j] & 0x0f);
      const float min = dmin * float(blocks[b].scales[j] >> 4);
      for (int i = j * 16; i < j * 16 + 16; ++i) dst[b * kQK_K + i] = step * float(q2k_level(blocks[b], i)) - min;
    }
  }
}

// sum_j scale_j (q_j . y_j) and sum_j min_j bsum_j are exact integers per super-block.
float vec_dot_q2_K_q8_K(const void* w, const void* a, int64_t n) {
  const BlockQ2_K* x = static_cast<const BlockQ2_K*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int32_t scaled = 0, mins = 0;
    for (int j = 0; j < kQK_K / 16; ++j) {
      int32_t dot = 0;
      for (int i = j * 16; i < j * 16 + 16; ++i) dot += q2k_level(x[b], i) * int32_t(y[b].qs[i]);
      scaled += int32_t(x[b].scales[j] & 0x0f) * dot;
      mins += int32_t(x[b].scales[j] >> 4) * int32_t(y[b].bsums[j]);
    }
    sum += y[b].d * (fp16_to_float(x[b].d) * float(scaled) - fp16_to_float(x[b].dmin) * float(mins));
  }
  return sum;
}

// Q3_K: (d * (scale - 32)) * (q - 4) in float, as ggml's dequantize_row_q3_K.
void dequantize_row_q3_K(const void* src, float* dst, int64_t n) {
  const BlockQ3_K* blocks = static_cast<const BlockQ3_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = fp16_to_float(blocks[b].d);
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float step = d * float(q3k_scale(blocks[b].scales, j));
      for (int i = j * 16; i < j * 16 + 16; ++i) dst[b * kQK_K + i] = step * float(q3k_level(blocks[b], i) - 4);
    }
  }
}

float vec_dot_q3_K_q8_K(const void* w, const void* a, int64_t n) {
  return dot_symmetric(static_cast<const BlockQ3_K*>(w), static_cast<const BlockQ8_K*>(a), n,
                       [](const BlockQ3_K& b, int i) { return q3k_level(b, i) - 4; },
                       [](const BlockQ3_K& b, int j) { return int32_t(q3k_scale(b.scales, j)); });
}

// Q8_K: d = amax / 127 in F32, q = round(x / d) (ties to even), bsums = sums of 16 q's.
void quantize_row_q8_K(const float* src, void* dst, int64_t n) {
  BlockQ8_K* blocks = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    BlockQ8_K& block = blocks[b];
    float amax = 0.0f;
    for (int i = 0; i < kQK_K; ++i) amax = std::max(amax, std::fabs(x[i]));
    block.d = amax / 127.0f;
    const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < kQK_K; ++i) {
      block.qs[i] = int8_t(std::clamp(round_nearest(x[i] * inverse), -127.0f, 127.0f));
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int i = g * 16; i < g * 16 + 16; ++i) sum += block.qs[i];
      block.bsums[g] = int16_t(sum);
    }
  }
}

void dequantize_row_q8_K(const void* src, float* dst, int64_t n) {
  const BlockQ8_K* blocks = static_cast<const BlockQ8_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    for (int i = 0; i < kQK_K; ++i) dst[b * kQK_K + i] = blocks[b].d * float(blocks[b].qs[i]);
  }
}

float vec_dot_q8_K_q8_K(const void* w, const void* a, int64_t n) {
  const BlockQ8_K* x = static_cast<const BlockQ8_K*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int32_t dot = 0;
    for (int i = 0; i < kQK_K; ++i) dot += int32_t(x[b].qs[i]) * int32_t(y[b].qs[i]);
    sum += x[b].d * y[b].d * float(dot);
  }
  return sum;
}

}  // namespace kestrel::quant::ref
