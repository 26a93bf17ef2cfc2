// MXFP4 (blocks of 32 E2M1 values with a shared E8M0 exponent, layout in quant/blocks.h), Q8_0
// activations.
//
// The quantizer is llama.cpp's quantize_row_mxfp4_ref and gguf-py's: e = floor(log2(amax)) - 2 +
// 127, so the scale 2^(e - 128) puts the largest magnitude between levels 8 and 16 (12 is the top
// level: values above 1.5 * 2^floor(log2 amax) clip to it), then each value takes the level of
// least |level * scale - x| (the first such index, so ties go to the smaller magnitude and zero
// is never stored as -0). Where llama.cpp's cast of a negative e to uint8 is undefined (amax <
// 2^-125) we store e = 0, the smallest scale. Dequantization is level * scale in float, bitwise
// as ggml and gguf-py (e = 255 is 2^127, so the largest levels overflow to infinity there too).
// The dot product sums level * q exactly per block and adds float(sum) * (d_a * scale).
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "quant/blocks.h"
#include "quant/reference_kernels.h"

#include "quant/no_fp_contract.h"  // last: no fused multiply-add in this file

namespace kestrel::quant::ref {
namespace {

constexpr int kBlock = kMXFP4BlockSize;

float mxfp4_scale(uint8_t e) {
  const uint32_t bits = mxfp4_scale_bits(e);
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return scale;
}

// The shared exponent of a block whose largest magnitude is amax. log2f as llama.cpp and gguf-py
// (float32 numpy) call it: just below a power of two it rounds up to the integer, and so does e.
uint8_t block_exponent(float amax) {
  if (!(amax > 0.0f)) return 0;
  const float e = std::floor(std::log2(amax)) - 2.0f + 127.0f;
  return e < 0.0f ? uint8_t(0) : uint8_t(e);
}

int nearest_level(float x, float scale) {
  int best = 0;
  float best_error = std::fabs(float(kMXFP4Levels[0]) * scale - x);
  for (int i = 1; i < 16; ++i) {
    const float error = std::fabs(float(kMXFP4Levels[i]) * scale - x);
    if (error < best_error) {
      best = i;
      best_error = error;
    }
  }
  return best;
}

int level(const uint8_t* qs, int i) {  // the level of element i of a block
  return kMXFP4Levels[i < kBlock / 2 ? qs[i] & 0x0f : qs[i - kBlock / 2] >> 4];
}

}  // namespace

void quantize_row_mxfp4(const float* src, void* dst, int64_t n) {
  BlockMXFP4* blocks = static_cast<BlockMXFP4*>(dst);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float* x = src + b * kBlock;
    float amax = 0.0f;
    for (int i = 0; i < kBlock; ++i) {
      if (amax < std::fabs(x[i])) amax = std::fabs(x[i]);
    }
    blocks[b].e = block_exponent(amax);
    const float scale = mxfp4_scale(blocks[b].e);
    for (int j = 0; j < kBlock / 2; ++j) {
      blocks[b].qs[j] = uint8_t(nearest_level(x[j], scale) | nearest_level(x[j + kBlock / 2], scale) << 4);
    }
  }
}

void dequantize_row_mxfp4(const void* src, float* dst, int64_t n) {
  const BlockMXFP4* blocks = static_cast<const BlockMXFP4*>(src);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float scale = mxfp4_scale(blocks[b].e);
    for (int i = 0; i < kBlock; ++i) dst[b * kBlock + i] = float(level(blocks[b].qs, i)) * scale;
  }
}

float vec_dot_mxfp4_q8_0(const void* w, const void* a, int64_t n) {
  const BlockMXFP4* x = static_cast<const BlockMXFP4*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kBlock; ++b) {
    int32_t dot = 0;
    for (int i = 0; i < kBlock; ++i) dot += level(x[b].qs, i) * int32_t(y[b].qs[i]);
    sum += float(dot) * (fp16_to_float(y[b].d) * mxfp4_scale(x[b].e));
  }
  return sum;
}

}  // namespace kestrel::quant::ref
