// NF4 (QLoRA's 4-bit NormalFloat, bitsandbytes' quant_type "nf4" at blocksize 64; layout and
// levels in quant/blocks.h): quantizers, dequantization and the dot with Q8_0.
//
// The plain quantizer is bitsandbytes' own (its default backend's quantize_4bit): per block absmax,
// scaled = clamp(x * (1 / absmax), -1, 1) in float, the index = the number of code midpoints
// (code[i] + code[i + 1]) / 2 below scaled (torch.bucketize: a value on a midpoint takes the lower
// index). Indices are chosen against the exact F32 absmax, as bitsandbytes does, so they are its
// indices bit for bit; the stored scale is that absmax rounded to F16. The importance-weighted
// quantizer (imatrix, AWQ) instead searches the block scale that minimises the weighted error.
#include <algorithm>
#include <cmath>

#include "core/half.h"
#include "quant/blocks.h"
#include "quant/reference_kernels.h"

#include "quant/no_fp_contract.h"  // last: no fused multiply-add in this file

namespace kestrel::quant::ref {
namespace {

constexpr int kBlock = kNF4BlockSize;

struct Midpoints {
  float v[15];
};
constexpr Midpoints kMidpoints = [] {
  Midpoints m{};
  for (int i = 0; i < 15; ++i) m.v[i] = (kNF4Codes[i] + kNF4Codes[i + 1]) / 2.0f;
  return m;
}();

// bitsandbytes' index of a scaled value in [-1, 1]: midpoints strictly below it (NaN: 0).
int bucket(float scaled) {
  int index = 0;
  while (index < 15 && kMidpoints.v[index] < scaled) ++index;
  return index;
}

// The level value the format computes with, as a float in [-1, 1].
float level_value(int index) { return float(nf4_level(index)) / float(kNF4LevelScale); }

void pack(const uint8_t* indices, BlockNF4& block) { pack_group_levels<kBlock, 4>(indices, block.qs); }

void quantize_block_absmax(const float* x, BlockNF4& block) {
  float absmax = 0.0f;
  for (int i = 0; i < kBlock; ++i) absmax = std::max(absmax, std::fabs(x[i]));
  const float inverse = 1.0f / std::max(absmax, 1e-38f);
  uint8_t indices[kBlock];
  for (int i = 0; i < kBlock; ++i) indices[i] = uint8_t(bucket(std::clamp(x[i] * inverse, -1.0f, 1.0f)));
  block.d = float_to_fp16(absmax);
  pack(indices, block);
}

// The index of the level nearest to v (v in level units; ties to the lower level).
int nearest_index(float v) { return bucket(std::clamp(v, -1.0f, 1.0f)); }

// Importance-weighted: scales absmax * (1 - 0.02 k), k = 0 .. 15, indices by nearest level, then d
// fitted by least squares on sum w_i (x_i - d level_i)^2; the best fit (then indices re-chosen at
// the stored F16 d) wins. Weights: importance_weights, as llama.cpp's quantizers.
void quantize_block_weighted(const float* x, const float* importance, BlockNF4& block) {
  float absmax = 0.0f;
  for (int i = 0; i < kBlock; ++i) absmax = std::max(absmax, std::fabs(x[i]));
  float w[kBlock];
  importance_weights(x, kBlock, importance, w);
  float best_d = 0.0f, best_gain = -1.0f;
  if (absmax > 1e-30f) {
    for (int k = 0; k < 16; ++k) {
      const float inverse = 1.0f / (absmax * (1.0f - 0.02f * float(k)));
      float sum_qx = 0.0f, sum_q2 = 0.0f;
      for (int i = 0; i < kBlock; ++i) {
        const float q = level_value(nearest_index(x[i] * inverse));
        sum_qx += w[i] * q * x[i];
        sum_q2 += w[i] * q * q;
      }
      if (sum_q2 <= 0.0f) continue;
      const float gain = sum_qx * sum_qx / sum_q2;  // the error is sum w x^2 - gain
      if (gain > best_gain) best_gain = gain, best_d = sum_qx / sum_q2;
    }
  }
  block.d = float_to_fp16(best_d);
  const float d = fp16_to_float(block.d);
  const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
  uint8_t indices[kBlock];
  for (int i = 0; i < kBlock; ++i) indices[i] = uint8_t(nearest_index(x[i] * inverse));
  pack(indices, block);
}

int index_of(const BlockNF4& block, int i) { return group_level<kBlock, 4>(block.qs, i); }

}  // namespace

void quantize_row_nf4(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockNF4*>(dst);
  for (int64_t b = 0; b < n / kBlock; ++b) quantize_block_absmax(src + b * kBlock, blocks[b]);
}

void quantize_row_nf4_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  auto* blocks = static_cast<BlockNF4*>(dst);
  for (int64_t b = 0; b < n / kBlock; ++b) quantize_block_weighted(src + b * kBlock, importance + b * kBlock, blocks[b]);
}

void dequantize_row_nf4(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockNF4*>(src);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float d = fp16_to_float(blocks[b].d);
    for (int i = 0; i < kBlock; ++i) dst[b * kBlock + i] = d * level_value(index_of(blocks[b], i));
  }
}

// Per activation block of 32 an exact integer sum of int16 levels x int8 values (|.| < 2^20), then
// float(dot) * (d_w / 16256) * d_a, the SIMD kernels' order of operations.
float vec_dot_nf4_q8_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockNF4*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(a);
  constexpr int kSubBlocks = kBlock / kQ8_0BlockSize;
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float scale = fp16_to_float(x[b].d) / float(kNF4LevelScale);
    for (int s = 0; s < kSubBlocks; ++s) {
      const BlockQ8_0& act = y[b * kSubBlocks + s];
      int32_t dot = 0;
      for (int i = 0; i < kQ8_0BlockSize; ++i) {
        dot += nf4_level(index_of(x[b], s * kQ8_0BlockSize + i)) * int32_t(act.qs[i]);
      }
      sum += float(dot) * (scale * fp16_to_float(act.d));
    }
  }
  return sum;
}

}  // namespace kestrel::quant::ref
