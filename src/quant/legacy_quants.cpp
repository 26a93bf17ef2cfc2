// Scalar references of GGML's other 32-block formats: Q4_1 and Q5_1 (scale and minimum, against
// Q8_1 activations, whose stored s = d * sum(q) carries the minimum's contribution) and Q5_0
// (symmetric, against Q8_0). Real GGUF files mix them in (Gemma 3 270M's Q4_K_M holds Q5_0).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "quant/blocks.h"
#include "quant/reference_kernels.h"

#include "quant/no_fp_contract.h"  // last: no fused multiply-add in this file

namespace kestrel::quant::ref {
namespace {

constexpr int kBlock = 32;

// Q4_1/Q5_1's affine levels for one block: x ~ m + d q with q in [0, max_level], m = min(x).
// Writes d and m (F16) and q, rounded as GGML does (truncating x / d + 0.5).
template <class Block>
void quantize_affine_block(const float* x, int max_level, Block& block, int* q) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < kBlock; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const float d = (hi - lo) / float(max_level);
  const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
  block.d = float_to_fp16(d);
  block.m = float_to_fp16(lo);
  for (int i = 0; i < kBlock; ++i) q[i] = std::min(max_level, int((x[i] - lo) * inverse + 0.5f));
}

uint32_t load_qh(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}

// The 5-bit value of element j (j < 32) of a block: low nibble from qs, fifth bit from qh.
int q5(const uint8_t* qs, uint32_t qh, int j) {
  const int low = j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
  return low | int((qh >> j) & 1u) << 4;
}

// Packs 32 5-bit values: element j's low nibble in byte j (or the high nibble of j - 16), its fifth
// bit in bit j of qh.
void pack_q5(const int* q, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = uint8_t((q[j] & 0x0f) | (q[j + 16] & 0x0f) << 4);
    qh |= uint32_t((q[j] >> 4) & 1) << j;
    qh |= uint32_t((q[j + 16] >> 4) & 1) << (j + 16);
  }
  std::memcpy(qh_bytes, &qh, 4);
}

}  // namespace

void quantize_row_q4_1(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ4_1*>(dst);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    int q[kBlock];
    quantize_affine_block(src + b * kBlock, 15, blocks[b], q);
    for (int j = 0; j < 16; ++j) blocks[b].qs[j] = uint8_t(q[j] | q[j + 16] << 4);
  }
}

void dequantize_row_q4_1(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_1*>(src);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float d = fp16_to_float(blocks[b].d), m = fp16_to_float(blocks[b].m);
    for (int j = 0; j < 16; ++j) {
      dst[b * kBlock + j] = float(blocks[b].qs[j] & 0x0f) * d + m;
      dst[b * kBlock + j + 16] = float(blocks[b].qs[j] >> 4) * d + m;
    }
  }
}

float vec_dot_q4_1_q8_1(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kBlock; ++b) {
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
      isum += (x[b].qs[j] & 0x0f) * int32_t(y[b].qs[j]);
      isum += (x[b].qs[j] >> 4) * int32_t(y[b].qs[j + 16]);
    }
    // sum_j (d q_j + m) a_j = d d_a sum q_j q_a_j + m s_a.
    sum += fp16_to_float(x[b].d) * fp16_to_float(y[b].d) * float(isum) +
           fp16_to_float(x[b].m) * fp16_to_float(y[b].s);
  }
  return sum;
}

void quantize_row_q5_0(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ5_0*>(dst);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float* x = src + b * kBlock;
    float amax = 0.0f, extreme = 0.0f;
    for (int i = 0; i < kBlock; ++i) {
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        extreme = x[i];
      }
    }
    // The value of largest magnitude maps to -16, so all of [-16, 15] is used.
    const float d = extreme / -16.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = float_to_fp16(d);
    int q[kBlock];
    for (int i = 0; i < kBlock; ++i) q[i] = std::min(31, int(x[i] * inverse + 16.5f));
    pack_q5(q, blocks[b].qs, blocks[b].qh);
  }
}

// Q5_0 weighted by importance (what llama-quantize --imatrix does for Q5_0): per block, the scale
// among 19 candidates around round-to-nearest's (the extreme value mapped to -(16 + s/10), s in
// -9..9) whose levels, assigned against the scale as stored in F16, give the least
// sum_i w_i (x_i - d q_i)^2, with w_i = importance_i * sqrt(sigma^2 + x_i^2) (sigma^2: the row's
// mean square, as llama.cpp weighs). Ties keep round-to-nearest's scale.
void quantize_row_q5_0_weighted(const float* src, void* dst, int64_t n, const float* importance) {
  auto* blocks = static_cast<BlockQ5_0*>(dst);
  float sum_x2 = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum_x2 += src[i] * src[i];
  const float sigma2 = n > 0 ? sum_x2 / float(n) : 0.0f;
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float* x = src + b * kBlock;
    float w[kBlock];
    float amax = 0.0f, extreme = 0.0f;
    for (int i = 0; i < kBlock; ++i) {
      w[i] = importance[b * kBlock + i] * std::sqrt(sigma2 + x[i] * x[i]);
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        extreme = x[i];
      }
    }
    float best_error = INFINITY;
    uint16_t best_d = 0;
    int best_q[kBlock];
    for (int step : {0, -9, -8, -7, -6, -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
      const uint16_t d_bits = float_to_fp16(extreme / -(16.0f + 0.1f * float(step)));
      const float d = fp16_to_float(d_bits);
      const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
      int q[kBlock];
      float error = 0.0f;
      for (int i = 0; i < kBlock; ++i) {
        q[i] = int(std::clamp(round_nearest(x[i] * inverse), -16.0f, 15.0f)) + 16;
        const float e = x[i] - d * float(q[i] - 16);
        error += w[i] * e * e;
      }
      if (error < best_error) {
        best_error = error;
        best_d = d_bits;
        std::memcpy(best_q, q, sizeof q);
      }
    }
    blocks[b].d = best_d;
    pack_q5(best_q, blocks[b].qs, blocks[b].qh);
  }
}

void dequantize_row_q5_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_0*>(src);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float d = fp16_to_float(blocks[b].d);
    const uint32_t qh = load_qh(blocks[b].qh);
    for (int j = 0; j < kBlock; ++j) dst[b * kBlock + j] = float(q5(blocks[b].qs, qh, j) - 16) * d;
  }
}

float vec_dot_q5_0_q8_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const uint32_t qh = load_qh(x[b].qh);
    int32_t isum = 0;
    for (int j = 0; j < kBlock; ++j) isum += (q5(x[b].qs, qh, j) - 16) * int32_t(y[b].qs[j]);
    sum += float(isum) * fp16_to_float(x[b].d) * fp16_to_float(y[b].d);
  }
  return sum;
}

void quantize_row_q5_1(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ5_1*>(dst);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    int q[kBlock];
    quantize_affine_block(src + b * kBlock, 31, blocks[b], q);
    pack_q5(q, blocks[b].qs, blocks[b].qh);
  }
}

void dequantize_row_q5_1(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_1*>(src);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float d = fp16_to_float(blocks[b].d), m = fp16_to_float(blocks[b].m);
    const uint32_t qh = load_qh(blocks[b].qh);
    for (int j = 0; j < kBlock; ++j) dst[b * kBlock + j] = float(q5(blocks[b].qs, qh, j)) * d + m;
  }
}

float vec_dot_q5_1_q8_1(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const uint32_t qh = load_qh(x[b].qh);
    int32_t isum = 0;
    for (int j = 0; j < kBlock; ++j) isum += q5(x[b].qs, qh, j) * int32_t(y[b].qs[j]);
    sum += fp16_to_float(x[b].d) * fp16_to_float(y[b].d) * float(isum) +
           fp16_to_float(x[b].m) * fp16_to_float(y[b].s);
  }
  return sum;
}

}  // namespace kestrel::quant::ref
