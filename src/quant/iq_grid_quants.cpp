// Scalar references of llama.cpp's grid formats IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M
// (layouts in quant/iq_grids.h): dequantization, bitwise as ggml's dequantize_row_iq* and gguf-py
// (IQ2: (d * (0.5 + s) * 0.25) * grid, negated by the sign; IQ1: (d * (2 s + 1)) * (grid + delta),
// each in float), and the dot products with Q8_K activations.
//
// Dots: every scale is an odd integer over 8 ((0.5 + s) * 0.25 = (2 s + 1) / 8, and an IQ1 value
// is (2 s + 1) (8 grid +- 1) / 8), so a super-block's dot is (d_w d_a / 8) times an exact integer
// sum of scale x (integer weight . q). The reference adds (d_w d_a) * float(sum) per super-block
// and multiplies the row's total by 1/8 (exact), as the SIMD kernels do.
//
// There is no quantizer (the table's quantize_row is null): llama.cpp itself requires an
// importance matrix for these types, and Kestrel only reads them.
#include "core/half.h"
#include "quant/iq_grids.h"
#include "quant/reference_kernels.h"

#include "quant/no_fp_contract.h"  // last: no fused multiply-add in this file

namespace kestrel::quant::ref {
namespace {

constexpr int kSub = 32;                   // elements per sub-block
constexpr int kSubBlocks = kQK_K / kSub;  // 8

// IQ2 step of a 4-bit scale code, as ggml and gguf-py compute it.
float iq2_step(float d, int code) { return d * (0.5f + float(code)) * 0.25f; }

// One IQ2 group of 8: grid magnitudes times the step, negated where the sign bit is set.
void put_iq2_group(uint64_t entry, uint8_t sign_bits, float step, float* y) {
  for (int j = 0; j < 8; ++j) {
    const float v = step * float(iq_grid_value(entry, j));
    y[j] = (sign_bits >> j) & 1 ? -v : v;
  }
}

// One IQ1 group: (d * (2 s + 1)) * (grid + delta).
void put_iq1_group(uint64_t entry, float step, float delta, float* y) {
  for (int j = 0; j < 8; ++j) y[j] = step * (float(iq1_grid_value(entry, j)) + delta);
}

// Dot of one IQ2 group with 8 activations: sum grid * sign * q.
int32_t iq2_group_dot(uint64_t entry, uint8_t sign_bits, const int8_t* q) {
  int32_t sum = 0;
  for (int j = 0; j < 8; ++j) {
    const int32_t v = iq_grid_value(entry, j) * int32_t(q[j]);
    sum += (sign_bits >> j) & 1 ? -v : v;
  }
  return sum;
}

// Dot of one IQ1 group, in eighths: sum (8 grid + delta_sign) * q.
int32_t iq1_group_dot(uint64_t entry, int delta_sign, const int8_t* q) {
  int32_t sum = 0;
  for (int j = 0; j < 8; ++j) sum += (8 * iq1_grid_value(entry, j) + delta_sign) * int32_t(q[j]);
  return sum;
}

uint32_t u32_at(const uint16_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 16; }

// The dot of a row of Block super-blocks: block_sum(block, q8) gives the exact integer of one
// super-block (q8: its 256 activation values), block_d its d.
template <class Block, class BlockSum, class BlockD>
float grid_dot(const void* w, const void* a, int64_t n, BlockSum block_sum, BlockD block_d) {
  const Block* x = static_cast<const Block*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) sum += (block_d(x[b]) * y[b].d) * float(block_sum(x[b], y[b].qs));
  return sum * 0.125f;
}

float f16_d(uint16_t bits) { return fp16_to_float(bits); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Dequantization

void dequantize_row_iq2_xxs(const void* src, float* dst, int64_t n) {
  const BlockIQ2_XXS* blocks = static_cast<const BlockIQ2_XXS*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b, dst += kQK_K) {
    const float d = fp16_to_float(blocks[b].d);
    for (int j = 0; j < kSubBlocks; ++j) {
      const uint32_t indices = u32_at(blocks[b].qs + 4 * j), signs = u32_at(blocks[b].qs + 4 * j + 2);
      const float step = iq2_step(d, int(signs >> 28));
      for (int l = 0; l < 4; ++l) {
        put_iq2_group(kIQ2XXSGrid[(indices >> (8 * l)) & 255], kIQ2SignBits[(signs >> (7 * l)) & 127], step,
                      dst + kSub * j + 8 * l);
      }
    }
  }
}

void dequantize_row_iq2_xs(const void* src, float* dst, int64_t n) {
  const BlockIQ2_XS* blocks = static_cast<const BlockIQ2_XS*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b, dst += kQK_K) {
    const float d = fp16_to_float(blocks[b].d);
    for (int j = 0; j < kSubBlocks; ++j) {
      for (int l = 0; l < 4; ++l) {
        const uint16_t q = blocks[b].qs[4 * j + l];
        const float step = iq2_step(d, (blocks[b].scales[j] >> (4 * (l / 2))) & 15);
        put_iq2_group(kIQ2XSGrid[q & 511], kIQ2SignBits[q >> 9], step, dst + kSub * j + 8 * l);
      }
    }
  }
}

void dequantize_row_iq2_s(const void* src, float* dst, int64_t n) {
  const BlockIQ2_S* blocks = static_cast<const BlockIQ2_S*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b, dst += kQK_K) {
    const BlockIQ2_S& x = blocks[b];
    const float d = fp16_to_float(x.d);
    for (int j = 0; j < kSubBlocks; ++j) {
      for (int l = 0; l < 4; ++l) {
        const float step = iq2_step(d, (x.scales[j] >> (4 * (l / 2))) & 15);
        put_iq2_group(kIQ2SGrid[iq2s_index(x, j, l)], x.qs[kQK_K / 8 + 4 * j + l], step, dst + kSub * j + 8 * l);
      }
    }
  }
}

void dequantize_row_iq1_s(const void* src, float* dst, int64_t n) {
  const BlockIQ1_S* blocks = static_cast<const BlockIQ1_S*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b, dst += kQK_K) {
    const BlockIQ1_S& x = blocks[b];
    const float d = fp16_to_float(x.d);
    for (int j = 0; j < kSubBlocks; ++j) {
      const float step = d * float(2 * ((x.qh[j] >> 12) & 7) + 1);
      const float delta = x.qh[j] & 0x8000 ? -kIQ1Delta : kIQ1Delta;
      for (int l = 0; l < 4; ++l) put_iq1_group(kIQ1SGrid[iq1s_index(x, j, l)], step, delta, dst + kSub * j + 8 * l);
    }
  }
}

void dequantize_row_iq1_m(const void* src, float* dst, int64_t n) {
  const BlockIQ1_M* blocks = static_cast<const BlockIQ1_M*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b, dst += kQK_K) {
    const BlockIQ1_M& x = blocks[b];
    const float d = fp16_to_float(iq1m_d_bits(x));
    for (int j = 0; j < kSubBlocks; ++j) {
      for (int l = 0; l < 4; ++l) {
        const float step = d * float(2 * iq1m_scale(x, j, l / 2) + 1);
        const float delta = iq1m_delta_sign(x, j, l) < 0 ? -kIQ1Delta : kIQ1Delta;
        put_iq1_group(kIQ1SGrid[iq1m_index(x, j, l)], step, delta, dst + kSub * j + 8 * l);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Dots with Q8_K. |sum| per super-block < 256 x 127 x 43 x 31 (IQ2) or 256 x 127 x 9 x 15 (IQ1):
// far inside int32.

float vec_dot_iq2_xxs_q8_K(const void* w, const void* a, int64_t n) {
  auto block_sum = [](const BlockIQ2_XXS& x, const int8_t* q) {
    int32_t sum = 0;
    for (int j = 0; j < kSubBlocks; ++j) {
      const uint32_t indices = u32_at(x.qs + 4 * j), signs = u32_at(x.qs + 4 * j + 2);
      int32_t dot = 0;
      for (int l = 0; l < 4; ++l) {
        dot += iq2_group_dot(kIQ2XXSGrid[(indices >> (8 * l)) & 255], kIQ2SignBits[(signs >> (7 * l)) & 127],
                             q + kSub * j + 8 * l);
      }
      sum += int32_t(2 * (signs >> 28) + 1) * dot;
    }
    return sum;
  };
  return grid_dot<BlockIQ2_XXS>(w, a, n, block_sum, [](const BlockIQ2_XXS& x) { return f16_d(x.d); });
}

float vec_dot_iq2_xs_q8_K(const void* w, const void* a, int64_t n) {
  auto block_sum = [](const BlockIQ2_XS& x, const int8_t* q) {
    int32_t sum = 0;
    for (int j = 0; j < kSubBlocks; ++j) {
      for (int l = 0; l < 4; ++l) {
        const uint16_t g = x.qs[4 * j + l];
        const int scale = 2 * ((x.scales[j] >> (4 * (l / 2))) & 15) + 1;
        sum += scale * iq2_group_dot(kIQ2XSGrid[g & 511], kIQ2SignBits[g >> 9], q + kSub * j + 8 * l);
      }
    }
    return sum;
  };
  return grid_dot<BlockIQ2_XS>(w, a, n, block_sum, [](const BlockIQ2_XS& x) { return f16_d(x.d); });
}

float vec_dot_iq2_s_q8_K(const void* w, const void* a, int64_t n) {
  auto block_sum = [](const BlockIQ2_S& x, const int8_t* q) {
    int32_t sum = 0;
    for (int j = 0; j < kSubBlocks; ++j) {
      for (int l = 0; l < 4; ++l) {
        const int scale = 2 * ((x.scales[j] >> (4 * (l / 2))) & 15) + 1;
        sum += scale * iq2_group_dot(kIQ2SGrid[iq2s_index(x, j, l)], x.qs[kQK_K / 8 + 4 * j + l], q + kSub * j + 8 * l);
      }
    }
    return sum;
  };
  return grid_dot<BlockIQ2_S>(w, a, n, block_sum, [](const BlockIQ2_S& x) { return f16_d(x.d); });
}

float vec_dot_iq1_s_q8_K(const void* w, const void* a, int64_t n) {
  auto block_sum = [](const BlockIQ1_S& x, const int8_t* q) {
    int32_t sum = 0;
    for (int j = 0; j < kSubBlocks; ++j) {
      const int delta_sign = x.qh[j] & 0x8000 ? -1 : 1;
      int32_t dot = 0;
      for (int l = 0; l < 4; ++l) dot += iq1_group_dot(kIQ1SGrid[iq1s_index(x, j, l)], delta_sign, q + kSub * j + 8 * l);
      sum += (2 * ((x.qh[j] >> 12) & 7) + 1) * dot;
    }
    return sum;
  };
  return grid_dot<BlockIQ1_S>(w, a, n, block_sum, [](const BlockIQ1_S& x) { return f16_d(x.d); });
}

float vec_dot_iq1_m_q8_K(const void* w, const void* a, int64_t n) {
  auto block_sum = [](const BlockIQ1_M& x, const int8_t* q) {
    int32_t sum = 0;
    for (int j = 0; j < kSubBlocks; ++j) {
      for (int l = 0; l < 4; ++l) {
        const int scale = 2 * iq1m_scale(x, j, l / 2) + 1;
        sum += scale * iq1_group_dot(kIQ1SGrid[iq1m_index(x, j, l)], iq1m_delta_sign(x, j, l), q + kSub * j + 8 * l);
      }
    }
    return sum;
  };
  return grid_dot<BlockIQ1_M>(w, a, n, block_sum, [](const BlockIQ1_M& x) { return f16_d(iq1m_d_bits(x)); });
}

}  // namespace kestrel::quant::ref
