// llama.cpp's 3-bit grid formats IQ3_XXS and IQ3_S (quant/blocks.h; both with Q8_K activations):
// dequantization, bitwise as ggml's dequantize_row_iq3_* and gguf-py (IQ3_XXS: (d * (0.5 + s)) *
// 0.5, IQ3_S: d * (1 + 2 s), then times the grid value, then the sign, in float), and the dot
// products, whose integer sums are exact per super-block (|sum| < 2^31: 8 x 31 x 32 x 62 x 127),
// with one float product per super-block as in the other formats' references. The quantizers are
// in iq3_quantize.cpp.
#include <cstring>

#include "core/half.h"
#include "quant/blocks.h"
#include "quant/iq3_grids.h"
#include "quant/reference_kernels.h"

#include "quant/no_fp_contract.h"  // last: no fused multiply-add in this file

namespace kestrel::quant::ref {
namespace {

constexpr int kSubBlocks = kQK_K / 32;

// The grid value of coordinate i (0..3) of a grid entry.
int grid_value(uint32_t entry, int i) { return int(entry >> (8 * i) & 0xff); }

uint32_t iq3xxs_word(const BlockIQ3_XXS& b, int j) {  // sub-block j's signs and scale
  uint32_t word;
  std::memcpy(&word, b.signs_scales + 4 * j, 4);
  return word;
}

// Value i (0..31) of IQ3_XXS sub-block j as a signed integer grid value.
int iq3xxs_value(const BlockIQ3_XXS& b, int j, int i) {
  const uint8_t signs = kIQ3Signs[(iq3xxs_word(b, j) >> (7 * (i / 8))) & 127];
  const int g = grid_value(kIQ3XXSGrid[b.qs[8 * j + i / 4]], i % 4);
  return (signs >> (i % 8) & 1) != 0 ? -g : g;
}

// Value i (0..31) of IQ3_S sub-block j as a signed integer grid value.
int iq3s_value(const BlockIQ3_S& b, int j, int i) {
  const int k = i / 4;
  const int index = b.qs[8 * j + k] | (b.qh[j] >> k & 1) << 8;
  const int g = grid_value(kIQ3SGrid[index], i % 4);
  return (b.signs[4 * j + i / 8] >> (i % 8) & 1) != 0 ? -g : g;
}

int iq3s_code(const BlockIQ3_S& b, int j) { return b.scales[j / 2] >> (4 * (j % 2)) & 15; }

}  // namespace

void dequantize_row_iq3_xxs(const void* src, float* dst, int64_t n) {
  const BlockIQ3_XXS* blocks = static_cast<const BlockIQ3_XXS*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ3_XXS& block = blocks[b];
    const float d = fp16_to_float(block.d);
    for (int j = 0; j < kSubBlocks; ++j) {
      const float step = d * (0.5f + float(iq3xxs_word(block, j) >> 28)) * 0.5f;
      for (int i = 0; i < 32; ++i) {
        const int v = iq3xxs_value(block, j, i);
        const float magnitude = step * float(v < 0 ? -v : v);
        dst[b * kQK_K + 32 * j + i] = v < 0 ? -magnitude : magnitude;
      }
    }
  }
}

void dequantize_row_iq3_s(const void* src, float* dst, int64_t n) {
  const BlockIQ3_S* blocks = static_cast<const BlockIQ3_S*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ3_S& block = blocks[b];
    const float d = fp16_to_float(block.d);
    for (int j = 0; j < kSubBlocks; ++j) {
      const float step = d * float(1 + 2 * iq3s_code(block, j));
      for (int i = 0; i < 32; ++i) {
        const int v = iq3s_value(block, j, i);
        const float magnitude = step * float(v < 0 ? -v : v);
        dst[b * kQK_K + 32 * j + i] = v < 0 ? -magnitude : magnitude;
      }
    }
  }
}

// Per super-block S = sum_j (2 s_j + 1) dot_j exactly; the value is d (2 s + 1) / 4 per step, so
// the row's sum of d_a d_w S is scaled by 1/4 at the end (exact: a power of two).
float vec_dot_iq3_xxs_q8_K(const void* w, const void* a, int64_t n) {
  const BlockIQ3_XXS* x = static_cast<const BlockIQ3_XXS*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int32_t scaled = 0;
    for (int j = 0; j < kSubBlocks; ++j) {
      int32_t dot = 0;
      for (int i = 0; i < 32; ++i) dot += iq3xxs_value(x[b], j, i) * int32_t(y[b].qs[32 * j + i]);
      scaled += int32_t(2 * (iq3xxs_word(x[b], j) >> 28) + 1) * dot;
    }
    sum += y[b].d * (fp16_to_float(x[b].d) * float(scaled));
  }
  return 0.25f * sum;
}

float vec_dot_iq3_s_q8_K(const void* w, const void* a, int64_t n) {
  const BlockIQ3_S* x = static_cast<const BlockIQ3_S*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int32_t scaled = 0;
    for (int j = 0; j < kSubBlocks; ++j) {
      int32_t dot = 0;
      for (int i = 0; i < 32; ++i) dot += iq3s_value(x[b], j, i) * int32_t(y[b].qs[32 * j + i]);
      scaled += (2 * iq3s_code(x[b], j) + 1) * dot;
    }
    sum += y[b].d * (fp16_to_float(x[b].d) * float(scaled));
  }
  return sum;
}

}  // namespace kestrel::quant::ref
