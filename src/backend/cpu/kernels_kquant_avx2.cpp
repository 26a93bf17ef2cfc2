// AVX2 kernels for the k-quants Q4_K, Q5_K and Q6_K against Q8_K activations (kernels_q8k_common.h,
// all three in the one plain layout, so a layer's Q4_K and Q6_K matrices share one conversion):
// unsigned levels in element order, one 32-element sub-block (Q4_K/Q5_K) or two 16-element ones
// (Q6_K) per 256-bit vector, maddubs with the signed activations, madd with the sub-block scales,
// then one F32 multiply-add per super-block (AVX2 has neither dpbusd nor GFNI, which the AVX-512
// lane-major design uses). Q4_K/Q5_K subtract dmin * min * bsum; Q6_K, stored as q + 32, subtracts
// 32 * scale * bsum per 16-element group, both through one madd with the activation's bsums.
//
// Batches (n > 1) decode a super-block once into registers/stack (K::W) and reuse it for every
// token of the tile; prefill decodes 4-row tiles once per 8-step chunk into an L1 buffer shared
// by a whole token block (kernels_tile.h): one thread, n = 512, Q4_K 85 -> 115 and Q6_K 68 -> 127
// GFLOP/s against 1 x 4 unpacked tiles (Intel). Decode (n = 1) runs 2 rows at a time through
// mac_direct, which decodes and multiplies 32 bytes at a time without storing the decoded block:
// the same integer sums and the same float operations as load_w + mac, so bitwise the same
// result. Sub-block scales come from one vector by a byte shuffle each, not a broadcast each.
#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_q8k_common.h"
#include "backend/cpu/kernels_simd_avx2.h"
#include "backend/cpu/kernels_tile.h"

namespace kestrel::cpu {
namespace {

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// An activation super-block, read in place.
struct KquantActivation {
  const uint8_t* block;
  __m256i q(int v) const { return load256(block + Q8KLayout::kQs + 32 * v); }
  __m256i bsums() const { return load256(block + Q8KLayout::kBsums); }
  __m256 d() const { return _mm256_set1_ps(load_f32(block + Q8KLayout::kScale)); }
};

// Byte-shuffle controls that spread int16 scale j of a vector holding 8 (in each 128-bit lane) over
// every int16 lane (kernels_tile.h: constants stay plain arrays).
alignas(32) const uint8_t kScaleSpread[8][32] = {
#define KESTREL_SPREAD(j) {2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, \
    2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, \
    2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, \
    2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1}
    KESTREL_SPREAD(0), KESTREL_SPREAD(1), KESTREL_SPREAD(2), KESTREL_SPREAD(3),
    KESTREL_SPREAD(4), KESTREL_SPREAD(5), KESTREL_SPREAD(6), KESTREL_SPREAD(7)};
#undef KESTREL_SPREAD

inline __m256i spread_scale(__m256i scales8, int j) {
  return _mm256_shuffle_epi8(scales8, _mm256_load_si256(reinterpret_cast<const __m256i*>(kScaleSpread[j])));
}

template <bool kFiveBit>
struct Q45KKernel {
  static constexpr int64_t kBlockBytes = kFiveBit ? 176 : 144, kStepBytes = kBlockBytes;
  static constexpr int kRows = 4, kTokens = 2, kDecodeRows = 2, kPackSteps = 8;  // see the top
  using Acc = __m256;
  using A = KquantActivation;
  struct W {
    __m256i levels[8];  // sub-block j: elements 32j .. 32j + 31
    __m256i scales[8];  // its scale in every int16 lane
    __m256i mins;       // min of the sub-block of each of the 16 bsums
    __m256 d, neg_dmin;
  };
  static int64_t steps(int64_t k) { return k / 256; }
  static int64_t direct_steps(int64_t k) { return k / 256; }
  static Acc zero() { return _mm256_setzero_ps(); }

  // The 8 sub-block scales (int16, in both 128-bit lanes) and the mins widened for the bsums madd.
  static void block_scales(const uint8_t* p, __m256i* scales8, __m256i* mins) {
    uint64_t scales, min_bytes;
    unpack_scales_mins(p + 4, &scales, &min_bytes);
    *scales8 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(scales))));
    const __m128i mn = _mm_cvtsi64_si128(int64_t(min_bytes));
    *mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));
  }
  // Levels of sub-blocks 2c and 2c + 1 (the low and high nibbles of 32 bytes, plus Q5_K's fifth bit).
  static void levels_pair(const uint8_t* p, int c, __m256i* even, __m256i* odd) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i chunk = load256(p + (kFiveBit ? 48 : 16) + 32 * c);
    *even = _mm256_and_si256(chunk, low4);
    *odd = _mm256_and_si256(_mm256_srli_epi16(chunk, 4), low4);
    if constexpr (kFiveBit) {
      // Bit j of qh[l] is the fifth bit of element 32j + l.
      const __m256i high = load256(p + 16), sixteen = _mm256_set1_epi8(16);
      const __m256i bit0 = _mm256_set1_epi8(char(1 << (2 * c))), bit1 = _mm256_set1_epi8(char(2 << (2 * c)));
      *even = _mm256_or_si256(*even, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(high, bit0), bit0), sixteen));
      *odd = _mm256_or_si256(*odd, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(high, bit1), bit1), sixteen));
    }
  }
  static __m256 block_d(const uint8_t* p) { return _mm256_set1_ps(fp16_to_f32(load_u16(p))); }
  static __m256 block_neg_dmin(const uint8_t* p) { return _mm256_set1_ps(-fp16_to_f32(load_u16(p + 2))); }
  // acc += d * d_a * sum_j scale_j (levels_j . q_j) - dmin * d_a * sum_p min_p bsum_p: the float
  // tail both mac and mac_direct end with.
  static void finish_block(Acc& acc, __m256i lanes, __m256i mins, __m256 wd, __m256 neg_dmin, const A& a) {
    const __m256 d = a.d();
    const __m256 m = _mm256_cvtepi32_ps(_mm256_madd_epi16(mins, a.bsums()));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_mul_ps(wd, d), acc);
    acc = _mm256_fmadd_ps(m, _mm256_mul_ps(neg_dmin, d), acc);
  }

  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    W w;
    w.d = block_d(p);
    w.neg_dmin = block_neg_dmin(p);
    __m256i scales8;
    block_scales(p, &scales8, &w.mins);
    for (int c = 0; c < 4; ++c) {
      levels_pair(p, c, &w.levels[2 * c], &w.levels[2 * c + 1]);
      w.scales[2 * c] = spread_scale(scales8, 2 * c);
      w.scales[2 * c + 1] = spread_scale(scales8, 2 * c + 1);
    }
    return w;
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t) { return load_w(row, s); }
  static A load_a(const uint8_t* act, int64_t s) { return {act + s * Q8KLayout::kBlockBytes}; }
  static void mac(Acc& acc, const W& w, const A& a) {
    __m256i lanes = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(_mm256_maddubs_epi16(w.levels[j], a.q(j)), w.scales[j]));
    }
    finish_block(acc, lanes, w.mins, w.d, w.neg_dmin, a);
  }
  // load_w + mac for one token, decoding 32 bytes at a time (see the top).
  static void mac_direct(Acc& acc, const uint8_t* row, int64_t s, const A& a) {
    const uint8_t* p = row + s * kBlockBytes;
    __m256i scales8, mins;
    block_scales(p, &scales8, &mins);
    __m256i lanes = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      __m256i even, odd;
      levels_pair(p, c, &even, &odd);
      lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(_mm256_maddubs_epi16(even, a.q(2 * c)), spread_scale(scales8, 2 * c)));
      lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(_mm256_maddubs_epi16(odd, a.q(2 * c + 1)), spread_scale(scales8, 2 * c + 1)));
    }
    finish_block(acc, lanes, mins, block_d(p), block_neg_dmin(p), a);
  }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

// Q6_K: element e of a super-block is q_e - 32 with q_e = 6 bits (low 4 in ql, top 2 in qh), times
// the int8 scale of its 16-element group. The levels stay q (unsigned, so maddubs takes them as
// its unsigned operand against the signed activations) and 32 * sum_g scale_g * bsum_g comes off.
struct Q6KKernel {
  static constexpr int64_t kBlockBytes = 210, kStepBytes = kBlockBytes;
  static constexpr int kRows = 4, kTokens = 2, kDecodeRows = 2, kPackSteps = 8;  // see the top
  using Acc = __m256;
  using A = KquantActivation;
  struct W {
    __m256i levels[8];  // q; vector 4h + q: elements 128h + 32q .. + 31
    __m256i scales[8];  // sub-block scale of each int16 pair (two sub-blocks per vector)
    __m256i scales16;   // the 16 group scales as int16, for the bsums correction
    __m256 d;
  };
  static int64_t steps(int64_t k) { return k / 256; }
  static int64_t direct_steps(int64_t k) { return k / 256; }
  static Acc zero() { return _mm256_setzero_ps(); }

  // The 16 group scales as int16 (group g in lane g).
  static __m256i group_scales(const uint8_t* p) {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192)));
  }
  // Vector v's scales: group 2v's scale in its low 128 bits, group 2v + 1's in its high ones.
  static __m256i vector_scales(__m256i scales16, int v) {
    // Dword v holds (scale 2v, scale 2v + 1); copy it everywhere, then spread within each lane.
    const __m256i pair = _mm256_permutevar8x32_epi32(scales16, _mm256_set1_epi32(v));
    return _mm256_shuffle_epi8(pair, _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                                      2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3));
  }
  // The levels of half h (elements 128h .. 128h + 127) as four 32-element vectors.
  static void levels_half(const uint8_t* p, int h, __m256i out[4]) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), top2 = _mm256_set1_epi8(0x30);
    const __m256i ql0 = load256(p + 64 * h), ql1 = load256(p + 64 * h + 32);
    const __m256i qh = load256(p + 128 + 32 * h);
    // Bits 2q, 2q + 1 of qh[l] are the top bits of element 128h + 32q + l: move them to 4-5.
    out[0] = _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), top2));
    out[1] = _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), top2));
    out[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, top2));
    out[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                             _mm256_and_si256(_mm256_srli_epi16(qh, 2), top2));
  }
  static __m256 block_d(const uint8_t* p) { return _mm256_set1_ps(fp16_to_f32(load_u16(p + 208))); }
  // lanes - 32 * sum_g scale_g * bsum_g, then acc += d * d_a * that (mac and mac_direct end here).
  static void finish_block(Acc& acc, __m256i lanes, __m256i scales16, __m256 d, const A& a) {
    lanes = _mm256_sub_epi32(lanes, _mm256_slli_epi32(_mm256_madd_epi16(scales16, a.bsums()), 5));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_mul_ps(d, a.d()), acc);
  }

  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    W w;
    w.d = block_d(p);
    w.scales16 = group_scales(p);
    for (int h = 0; h < 2; ++h) {
      levels_half(p, h, &w.levels[4 * h]);
      for (int q = 0; q < 4; ++q) w.scales[4 * h + q] = vector_scales(w.scales16, 4 * h + q);
    }
    return w;
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t) { return load_w(row, s); }
  static A load_a(const uint8_t* act, int64_t s) { return {act + s * Q8KLayout::kBlockBytes}; }
  static void mac(Acc& acc, const W& w, const A& a) {
    __m256i lanes = _mm256_setzero_si256();
    for (int v = 0; v < 8; ++v) {
      lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(_mm256_maddubs_epi16(w.levels[v], a.q(v)), w.scales[v]));
    }
    finish_block(acc, lanes, w.scales16, w.d, a);
  }
  // load_w + mac for one token, decoding half a super-block at a time (see the top).
  static void mac_direct(Acc& acc, const uint8_t* row, int64_t s, const A& a) {
    const uint8_t* p = row + s * kBlockBytes;
    const __m256i scales16 = group_scales(p);
    __m256i lanes = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      __m256i levels[4];
      levels_half(p, h, levels);
      for (int q = 0; q < 4; ++q) {
        const int v = 4 * h + q;
        lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(_mm256_maddubs_epi16(levels[q], a.q(v)), vector_scales(scales16, v)));
      }
    }
    finish_block(acc, lanes, scales16, block_d(p), a);
  }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

constexpr FormatKernels kQ4K{DType::Q4_K, Q8KLayout::row_bytes, convert_q8_k, matmul_tile<Q45KKernel<false>>};
constexpr FormatKernels kQ5K{DType::Q5_K, Q8KLayout::row_bytes, convert_q8_k, matmul_tile<Q45KKernel<true>>};
constexpr FormatKernels kQ6K{DType::Q6_K, Q8KLayout::row_bytes, convert_q8_k, matmul_tile<Q6KKernel>};

}  // namespace

const FormatKernels* avx2_kquant_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::Q4_K: return &kQ4K;
    case DType::Q5_K: return &kQ5K;
    case DType::Q6_K: return &kQ6K;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu
