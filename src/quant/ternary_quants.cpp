// llama.cpp's ternary formats TQ1_0 (1.6875 bits per value) and TQ2_0 (2.0625): super-blocks of
// 256 values in {-1, 0, 1} times an F16 d (layouts in quant/blocks.h), Q8_K activations.
//
// The quantizers are llama.cpp's quantize_row_tq*_ref and gguf-py's: d = the block's largest
// magnitude, each value round(x / d) (halves away from zero), so the output is byte for byte
// theirs. Dequantization is d * (trit - 1) in float, bitwise as ggml and gguf-py. The dot
// products sum (trit - 1) * q exactly per super-block and add float(sum) * (d * d_a), one float
// product per super-block as ggml's generic vec_dot_tq*_q8_K do.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "quant/blocks.h"
#include "quant/reference_kernels.h"

#include "quant/no_fp_contract.h"  // last: no fused multiply-add in this file

namespace kestrel::quant::ref {
namespace {

// Which value of a TQ1_0 super-block trit n of byte `byte` (0..47 of qs, 48..51 for qh) holds.
int tq1_value_index(int byte, int n) {
  if (byte < 32) return 32 * n + byte;
  if (byte < 48) return 160 + 16 * n + (byte - 32);
  return 240 + 4 * n + (byte - 48);
}

// The ternary digit (0, 1, 2 for -1, 0, 1) of every value of a super-block, and its F16 d.
uint16_t ternary_digits(const float* x, int* digits) {
  float amax = 0.0f;
  for (int i = 0; i < kQK_K; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float inverse = amax != 0.0f ? 1.0f / amax : 0.0f;
  for (int i = 0; i < kQK_K; ++i) digits[i] = int(std::lround(x[i] * inverse)) + 1;
  return float_to_fp16(amax);
}

// The 5 (or, for qh, 4 then a zero) trits of a byte, first most significant, as the fraction
// ceil(t * 256 / 243): the byte tq1_trit decodes.
uint8_t pack_trits(const int* digits, int byte) {
  int t = 0;
  for (int n = 0; n < 5; ++n) t = 3 * t + (byte < 48 || n < 4 ? digits[tq1_value_index(byte, n)] : 0);
  return uint8_t((t * 256 + 242) / 243);
}

}  // namespace

void quantize_row_tq1_0(const float* src, void* dst, int64_t n) {
  BlockTQ1_0* blocks = static_cast<BlockTQ1_0*>(dst);
  int digits[kQK_K];
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    blocks[b].d = ternary_digits(src + b * kQK_K, digits);
    for (int byte = 0; byte < 48; ++byte) blocks[b].qs[byte] = pack_trits(digits, byte);
    for (int j = 0; j < 4; ++j) blocks[b].qh[j] = pack_trits(digits, 48 + j);
  }
}

void quantize_row_tq2_0(const float* src, void* dst, int64_t n) {
  BlockTQ2_0* blocks = static_cast<BlockTQ2_0*>(dst);
  int digits[kQK_K];
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    blocks[b].d = ternary_digits(src + b * kQK_K, digits);
    std::memset(blocks[b].qs, 0, sizeof blocks[b].qs);
    for (int i = 0; i < kQK_K; ++i) {
      const int half = i / 128, l = (i % 128) / 32, m = i % 32;
      blocks[b].qs[32 * half + m] |= uint8_t(digits[i] << (2 * l));
    }
  }
}

namespace {

// The level (trit - 1, or code - 1 for TQ2_0) of every value of a super-block.
void tq1_levels(const BlockTQ1_0& block, int* levels) {
  for (int byte = 0; byte < 52; ++byte) {
    const uint8_t bits = byte < 48 ? block.qs[byte] : block.qh[byte - 48];
    for (int n = 0; n < (byte < 48 ? 5 : 4); ++n) levels[tq1_value_index(byte, n)] = tq1_trit(bits, n) - 1;
  }
}

void tq2_levels(const BlockTQ2_0& block, int* levels) {
  for (int i = 0; i < kQK_K; ++i) {
    const int half = i / 128, l = (i % 128) / 32, m = i % 32;
    levels[i] = ((block.qs[32 * half + m] >> (2 * l)) & 3) - 1;
  }
}

template <class Block, void (*Levels)(const Block&, int*)>
void dequantize_ternary(const void* src, float* dst, int64_t n) {
  const Block* blocks = static_cast<const Block*>(src);
  int levels[kQK_K];
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    Levels(blocks[b], levels);
    const float d = fp16_to_float(blocks[b].d);
    for (int i = 0; i < kQK_K; ++i) dst[b * kQK_K + i] = float(levels[i]) * d;
  }
}

template <class Block, void (*Levels)(const Block&, int*)>
float dot_ternary_q8_K(const void* w, const void* a, int64_t n) {
  const Block* x = static_cast<const Block*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
  int levels[kQK_K];
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    Levels(x[b], levels);
    int32_t dot = 0;  // |dot| <= 256 * 2 * 127
    for (int i = 0; i < kQK_K; ++i) dot += levels[i] * int32_t(y[b].qs[i]);
    sum += float(dot) * (fp16_to_float(x[b].d) * y[b].d);
  }
  return sum;
}

}  // namespace

void dequantize_row_tq1_0(const void* src, float* dst, int64_t n) {
  dequantize_ternary<BlockTQ1_0, tq1_levels>(src, dst, n);
}
void dequantize_row_tq2_0(const void* src, float* dst, int64_t n) {
  dequantize_ternary<BlockTQ2_0, tq2_levels>(src, dst, n);
}
float vec_dot_tq1_0_q8_K(const void* w, const void* a, int64_t n) {
  return dot_ternary_q8_K<BlockTQ1_0, tq1_levels>(w, a, n);
}
float vec_dot_tq2_0_q8_K(const void* w, const void* a, int64_t n) {
  return dot_ternary_q8_K<BlockTQ2_0, tq2_levels>(w, a, n);
}

}  // namespace kestrel::quant::ref
