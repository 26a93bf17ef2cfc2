// AVX2 kernels for llama.cpp's 3-bit grid formats IQ3_XXS and IQ3_S (quant/blocks.h) against
// Q8_K activations (the plain layout of kernels_q8k_common.h). A step is one super-block (98 or
// 110 bytes); each 32-value sub-block is one vector:
//   magnitudes  8 grid entries (quant/iq3_grids.h) of 4 unsigned bytes, looked up one by one
//               (scalar loads: gathers are slower on the Zen cores this was written for);
//   signs       +-1 per byte: IQ3_XXS from an 8-byte table per 7-bit sign index (its parity bit
//               included), IQ3_S by spreading its 32 sign bits over the bytes;
//   scale       the sub-block's 2 s + 1 in every int16 lane.
// maddubs(magnitude, sign(q_a, signs)) multiplies exact values (grid <= 62, |q_a| <= 127: pair
// sums <= 15748), madd with the scale gives int32 lanes whose sum S over the super-block is exact
// (< 2^31); a (row, token) accumulator keeps 8 float lanes, acc = fma(float(lanes), d_w * d_a,
// acc), summed horizontally once at the end, on every path (mac, mac_direct, the 4-row prefill tile
// SubBlockRows4 of kernels_subblock_rows_avx2.h), so decode and batches agree bit for bit.
// IQ3_XXS's value is d (2 s + 1) / 4 per grid step: its d_w is read as d / 4 (exact).
#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_q8k_common.h"
#include "backend/cpu/kernels_simd_avx2.h"
#include "backend/cpu/kernels_subblock_rows_avx2.h"
#include "backend/cpu/kernels_tile.h"
#include "quant/blocks.h"
#include "quant/iq3_grids.h"

namespace kestrel::cpu {
namespace {

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// kIQ3Signs expanded: 8 bytes of +1 / -1 per 7-bit index, as one little-endian uint64.
struct SignTable {
  uint64_t v[128];
};
constexpr SignTable kSigns = [] {
  SignTable table{};
  for (int i = 0; i < 128; ++i) {
    for (int b = 0; b < 8; ++b) {
      const uint64_t byte = (quant::kIQ3Signs[i] >> b & 1) != 0 ? 0xff : 0x01;
      table.v[i] |= byte << (8 * b);
    }
  }
  return table;
}();

// The int16 pair sums of grid magnitudes x (q_a with the weights' signs): exact.
inline __m256i signed_products(__m256i magnitude, __m256i signs, __m256i q) {
  return _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(q, signs));
}

// IQ3_XXS: d, qs[64] (8-bit indices), 8 little-endian words (4 x 7 sign bits, 4-bit code).
struct Iq3Xxs {
  static constexpr int64_t kBlockBytes = 98;
  static float d(const uint8_t* p) { return fp16_to_f32(load_u16(p)) * 0.25f; }
  // The 8 scales 2 s + 1 as int16 (in both 128-bit lanes).
  static __m256i scales(const uint8_t* p) {
    const __m256i codes = _mm256_srli_epi32(load256(p + 66), 28);
    const __m256i odd = _mm256_add_epi32(_mm256_add_epi32(codes, codes), _mm256_set1_epi32(1));
    return _mm256_broadcastsi128_si256(_mm_packs_epi32(_mm256_castsi256_si128(odd), _mm256_extracti128_si256(odd, 1)));
  }
  static __m256i magnitudes(const uint8_t* p, int j) {
    const uint8_t* q = p + 2 + 8 * j;
    const uint32_t* g = quant::kIQ3XXSGrid;
    return _mm256_setr_epi32(int(g[q[0]]), int(g[q[1]]), int(g[q[2]]), int(g[q[3]]), int(g[q[4]]), int(g[q[5]]),
                             int(g[q[6]]), int(g[q[7]]));
  }
  static __m256i signs(const uint8_t* p, int j) {
    const uint32_t w = load_u32(p + 66 + 4 * j);
    return _mm256_setr_epi64x(int64_t(kSigns.v[w & 127]), int64_t(kSigns.v[w >> 7 & 127]),
                              int64_t(kSigns.v[w >> 14 & 127]), int64_t(kSigns.v[w >> 21 & 127]));
  }
};

// IQ3_S: d, qs[64] (low 8 index bits), qh[8] (bit 8), signs[32] (one bit per value), scales[4].
struct Iq3S {
  static constexpr int64_t kBlockBytes = 110;
  static float d(const uint8_t* p) { return fp16_to_f32(load_u16(p)); }
  static __m256i scales(const uint8_t* p) {
    const uint32_t packed = load_u32(p + 106);
    const __m128i low = _mm_cvtsi32_si128(int(packed & 0x0f0f0f0fu));
    const __m128i high = _mm_cvtsi32_si128(int(packed >> 4 & 0x0f0f0f0fu));
    const __m128i codes = _mm_cvtepu8_epi16(_mm_unpacklo_epi8(low, high));  // code j in lane j
    return _mm256_broadcastsi128_si256(_mm_add_epi16(_mm_add_epi16(codes, codes), _mm_set1_epi16(1)));
  }
  static __m256i magnitudes(const uint8_t* p, int j) {
    const uint8_t* q = p + 2 + 8 * j;
    const uint32_t h = p[66 + j];
    const uint32_t* g = quant::kIQ3SGrid;
    return _mm256_setr_epi32(int(g[q[0] | (h << 8 & 256)]), int(g[q[1] | (h << 7 & 256)]),
                             int(g[q[2] | (h << 6 & 256)]), int(g[q[3] | (h << 5 & 256)]),
                             int(g[q[4] | (h << 4 & 256)]), int(g[q[5] | (h << 3 & 256)]),
                             int(g[q[6] | (h << 2 & 256)]), int(g[q[7] | (h << 1 & 256)]));
  }
  // Byte i takes bit i % 8 of sign byte i / 8: -1 where set, else +1.
  static __m256i signs(const uint8_t* p, int j) {
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int(load_u32(p + 74 + 4 * j))),
                                               _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202,
                                                                  0x0303030303030303));
    const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
    const __m256i negative = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_or_si256(negative, _mm256_set1_epi8(1));
  }
};

template <class F>
struct Iq3Kernel {
  static constexpr int64_t kBlockBytes = F::kBlockBytes, kStepBytes = kBlockBytes;
  // Batches of 2-3 tokens (from 4 on: SubBlockRows4): 2 rows x 4 steps x 800 bytes of W in L1.
  static constexpr int kRows = 2, kTokens = 2, kDecodeRows = 2;
  static constexpr int64_t kPackSteps = 4;
  using Acc = __m256;
  struct A {
    const uint8_t* block;
    __m256i q(int j) const { return load256(block + Q8KLayout::kQs + 32 * j); }
    float d() const { return load_f32(block + Q8KLayout::kScale); }
  };
  struct W {
    __m256i magnitude[8];  // sub-block j: values 32j .. 32j + 31
    __m256i sign[8];       // +-1 per value
    __m256i scale[8];      // sub-block j's 2 s + 1 in every int16 lane
    float d;
  };
  static int64_t steps(int64_t k) { return k / 256; }
  static int64_t direct_steps(int64_t k) { return k / 256; }
  static Acc zero() { return _mm256_setzero_ps(); }

  // Scale j of F::scales in every int16 lane.
  static __m256i spread(__m256i scales, int j) {
    return _mm256_shuffle_epi8(scales, _mm256_set1_epi16(int16_t(0x0100 + 0x0202 * j)));
  }
  static __m256i sub_block(__m256i magnitude, __m256i sign, __m256i scale, __m256i q) {
    return _mm256_madd_epi16(signed_products(magnitude, sign, q), scale);
  }
  static void finish_block(Acc& acc, __m256i lanes, float d, const A& a) {
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(d * a.d()), acc);
  }

  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    W w;
    w.d = F::d(p);
    const __m256i scales = F::scales(p);
    for (int j = 0; j < 8; ++j) {
      w.magnitude[j] = F::magnitudes(p, j);
      w.sign[j] = F::signs(p, j);
      w.scale[j] = spread(scales, j);
    }
    return w;
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t) { return load_w(row, s); }
  static A load_a(const uint8_t* act, int64_t s) { return {act + s * Q8KLayout::kBlockBytes}; }
  static void mac(Acc& acc, const W& w, const A& a) {
    __m256i lanes = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) lanes = _mm256_add_epi32(lanes, sub_block(w.magnitude[j], w.sign[j], w.scale[j], a.q(j)));
    finish_block(acc, lanes, w.d, a);
  }
  // The super-block's int32 lanes, decoding one sub-block at a time (one token: no W stored).
  static __m256i direct_lanes(const uint8_t* p, const A& a) {
    const __m256i scales = F::scales(p);
    __m256i lanes = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      lanes = _mm256_add_epi32(lanes, sub_block(F::magnitudes(p, j), F::signs(p, j), spread(scales, j), a.q(j)));
    }
    return lanes;
  }
  static void mac_direct(Acc& acc, const uint8_t* row, int64_t s, const A& a) {
    const uint8_t* p = row + s * kBlockBytes;
    finish_block(acc, direct_lanes(p, a), F::d(p), a);
  }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

constexpr FormatKernels kIq3Xxs{DType::IQ3_XXS, Q8KLayout::row_bytes, convert_q8_k, interleaved_matmul<SubBlockRows4<Iq3Kernel<Iq3Xxs>>>};
constexpr FormatKernels kIq3S{DType::IQ3_S, Q8KLayout::row_bytes, convert_q8_k, interleaved_matmul<SubBlockRows4<Iq3Kernel<Iq3S>>>};

}  // namespace

const FormatKernels* avx2_iq3_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::IQ3_XXS: return &kIq3Xxs;
    case DType::IQ3_S: return &kIq3S;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu
