// AVX2 kernels for the k-quants Q4_K and Q5_K against Q8_K activations (kernels_q8k_common.h, all
// in the one plain layout, so a layer's Q4_K and Q6_K matrices share one conversion; the
// 16-element-group k-quants Q6_K, Q3_K and Q2_K are in kernels_kquant16_avx2.cpp): unsigned levels
// in element order, one 32-element sub-block per 256-bit vector, maddubs with the signed
// activations, madd with the sub-block scales (AVX2 has neither dpbusd nor GFNI, which the AVX-512
// lane-major design uses), dmin * min * bsum subtracted through one madd with the activation's
// bsums.
//
// Every path reduces a super-block to its exact integer sums per (row, token) and ends with the
// same scalar FMAs (the kernels' finish_block), so decode, small batches and the interleaved
// prefill tiles (interleaved_matmul, kernels_interleave_avx2.h: 4 rows interleaved 8 bytes at a time, so several
// maddubs share one madd with the scales) give bitwise the same results. Decode (n = 1) runs 2
// rows at a time through mac_direct2_lanes, which decodes and multiplies 32 bytes at a time
// without storing the decoded block, unpacks both rows' 6-bit scale and min codes in one vector
// (scale_min_codes2) and their (d, dmin) in one conversion, reduces both rows' sums in one hadd
// tree and keeps the two accumulators in one vector; sub-block scales come from that vector by
// a byte shuffle each, not a broadcast each (every row path unpacks the codes this way).
#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_kquant_avx2.h"
#include "backend/cpu/kernels_q8k_common.h"
#include "backend/cpu/kernels_simd_avx2.h"
#include "backend/cpu/kernels_interleave_avx2.h"
#include "backend/cpu/kernels_tile.h"

namespace kestrel::cpu {
namespace {



// Two rows' 12 bytes of 6-bit scale and min codes unpacked in vector lanes (unpack_scales_mins for
// both rows at once; p0 == p1 gives one row's codes in both lanes): per 128-bit lane (row 0 low,
// row 1 high) bytes 0-7 the sub-blocks' scales, 8-15 their mins. With b the 12 bytes: scale j < 4 = b[j] & 63, scale j >= 4 = (b[j + 4] & 15) |
// (b[j - 4] >> 6) << 4; min j < 4 = b[j + 4] & 63, min j >= 4 = (b[j + 4] >> 4) | (b[j] >> 6) << 4.
alignas(32) const uint8_t kCodePick[32] = {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11,
                                          0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11};
alignas(32) const uint8_t kCodeTopPick[32] = {0x80, 0x80, 0x80, 0x80, 0, 1, 2, 3, 0x80, 0x80, 0x80, 0x80, 4, 5, 6, 7,
                                             0x80, 0x80, 0x80, 0x80, 0, 1, 2, 3, 0x80, 0x80, 0x80, 0x80, 4, 5, 6, 7};
alignas(32) const uint8_t kCodeLowMask[32] = {63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15,
                                             63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15};
// Byte j of a lane to every int16 lane (scale j), and the mins (bytes 8-15) to the 16 bsums' lanes
// (kernels_tile.h: constants stay plain arrays).
alignas(32) const uint8_t kCodeSpread[8][32] = {
#define KESTREL_SPREAD(j) {j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, \
    j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80}
    KESTREL_SPREAD(0), KESTREL_SPREAD(1), KESTREL_SPREAD(2), KESTREL_SPREAD(3),
    KESTREL_SPREAD(4), KESTREL_SPREAD(5), KESTREL_SPREAD(6), KESTREL_SPREAD(7)};
#undef KESTREL_SPREAD
alignas(32) const uint8_t kMinSpread[32] = {8, 0x80, 8, 0x80, 9, 0x80, 9, 0x80, 10, 0x80, 10, 0x80, 11, 0x80, 11, 0x80,
                                           12, 0x80, 12, 0x80, 13, 0x80, 13, 0x80, 14, 0x80, 14, 0x80, 15, 0x80, 15, 0x80};

inline __m256i load_control(const uint8_t* c) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(c)); }

inline __m256i scale_min_codes2(const uint8_t* p0, const uint8_t* p1) {
  const __m256i b = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + 4))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1 + 4)), 1);
  const __m256i low = _mm256_shuffle_epi8(b, load_control(kCodePick));  // b0-3 | b8-11 | b4-7 | b8-11
  const __m256i low_bits = _mm256_and_si256(_mm256_blend_epi32(low, _mm256_srli_epi16(low, 4), 0x88),
                                            load_control(kCodeLowMask));
  const __m256i top = _mm256_shuffle_epi8(b, load_control(kCodeTopPick));  // 0 | b0-3 | 0 | b4-7
  return _mm256_or_si256(low_bits, _mm256_and_si256(_mm256_srli_epi16(top, 2), _mm256_set1_epi8(0x30)));
}

template <bool kFiveBit>
struct Q45KKernel {
  static constexpr int64_t kBlockBytes = kFiveBit ? 176 : 144, kStepBytes = kBlockBytes;
  static constexpr int kRows = 4, kTokens = 2, kDecodeRows = 2;  // n >= 4: Q45KInterleave (below)
  using Acc = float;
  using A = KquantActivation;
  struct W {
    __m256i levels[8];  // sub-block j: elements 32j .. 32j + 31
    __m256i scales[8];  // its scale in every int16 lane
    __m256i mins;       // min of the sub-block of each of the 16 bsums
    float d, neg_dmin;
  };
  static int64_t steps(int64_t k) { return k / 256; }
  static int64_t direct_steps(int64_t k) { return k / 256; }
  static Acc zero() { return 0.0f; }

  // The 8 sub-block mins (one byte each), widened to the min of each of the 16 bsums' sub-block.
  static __m256i bsum_mins(uint64_t min_bytes) {
    const __m128i mn = _mm_cvtsi64_si128(int64_t(min_bytes));
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));
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
  static float block_d(const uint8_t* p) { return fp16_to_f32(load_u16(p)); }
  static float block_neg_dmin(const uint8_t* p) { return -fp16_to_f32(load_u16(p + 2)); }
  // The float tail of every path (mac, mac_direct(2), the interleaved tiles): with the
  // super-block's exact integer sums S = sum_j scale_j (levels_j . q_j) and M = sum_p min_p bsum_p
  // (here as int32 lanes), acc = fma(S, d * d_a, acc), then acc = fma(M, -dmin * d_a, acc).
  static void finish_block(Acc& acc, __m256i sum_lanes, __m256i min_lanes, float wd, float neg_dmin, const A& a) {
    const __m128i sums = lane_sums2(sum_lanes, min_lanes);  // S, M, S, M
    const float d = a.d();
    acc = fma1(float(_mm_cvtsi128_si32(sums)), wd * d, acc);
    acc = fma1(float(_mm_extract_epi32(sums, 1)), neg_dmin * d, acc);
  }

  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    W w;
    w.d = block_d(p);
    w.neg_dmin = block_neg_dmin(p);
    const __m256i codes = scale_min_codes2(p, p);
    w.mins = _mm256_shuffle_epi8(codes, load_control(kMinSpread));
    for (int c = 0; c < 4; ++c) {
      levels_pair(p, c, &w.levels[2 * c], &w.levels[2 * c + 1]);
      w.scales[2 * c] = _mm256_shuffle_epi8(codes, load_control(kCodeSpread[2 * c]));
      w.scales[2 * c + 1] = _mm256_shuffle_epi8(codes, load_control(kCodeSpread[2 * c + 1]));
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
    finish_block(acc, lanes, _mm256_madd_epi16(w.mins, a.bsums()), w.d, w.neg_dmin, a);
  }
  // The integer lanes of S and of M for super-block p, decoding 32 bytes at a time; codes: the
  // row's scale and min codes in both 128-bit lanes (scale_min_codes2).
  static void direct_sums(const uint8_t* p, const A& a, __m256i codes, __m256i* sum_lanes, __m256i* min_lanes) {
    __m256i lanes = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      __m256i even, odd;
      levels_pair(p, c, &even, &odd);
      lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(_mm256_maddubs_epi16(even, a.q(2 * c)),
                                                        _mm256_shuffle_epi8(codes, load_control(kCodeSpread[2 * c]))));
      lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(_mm256_maddubs_epi16(odd, a.q(2 * c + 1)),
                                                        _mm256_shuffle_epi8(codes, load_control(kCodeSpread[2 * c + 1]))));
    }
    *sum_lanes = lanes;
    *min_lanes = _mm256_madd_epi16(_mm256_shuffle_epi8(codes, load_control(kMinSpread)), a.bsums());
  }
  // mac_direct for two rows (decode runs 2 rows at a time), their accumulators in vector lanes 0
  // and 1 (kernels_tile.h): both rows' scale codes and (d, dmin) unpacked together, their four
  // sums reduced in one hadd tree; the same integer sums and float operations per row.
  static void mac_direct2_lanes(__m128& pair, const uint8_t* row0, const uint8_t* row1, int64_t s, const A& a) {
    const uint8_t* p0 = row0 + s * kBlockBytes;
    const uint8_t* p1 = row1 + s * kBlockBytes;
    const __m256i codes = scale_min_codes2(p0, p1);
    __m256i sum0, min0, sum1, min1;
    direct_sums(p0, a, _mm256_permute4x64_epi64(codes, 0x44), &sum0, &min0);
    direct_sums(p1, a, _mm256_permute4x64_epi64(codes, 0xee), &sum1, &min1);
    fma_affine_lanes(pair, sum0, sum1, min0, min1, affine_scales2(p0, p1, a.d()));
  }
  // load_w + mac for one token (see the top).
  static void mac_direct(Acc& acc, const uint8_t* row, int64_t s, const A& a) {
    const uint8_t* p = row + s * kBlockBytes;
    __m256i sum_lanes, min_lanes;
    direct_sums(p, a, scale_min_codes2(p, p), &sum_lanes, &min_lanes);
    finish_block(acc, sum_lanes, min_lanes, block_d(p), block_neg_dmin(p), a);
  }
  static float finish(Acc acc, const uint8_t*) { return acc; }
};

// Q4_K/Q5_K prefill (n >= kInterleavedTokens): 4 weight rows are decoded per super-block into an
// L1 buffer interleaved 8 bytes at a time (vector g of sub-block j = elements 32j + 8g .. + 7 of
// rows 0, 1, 2, 3), so one maddubs against a token's 8 activation bytes broadcast serves 4 rows,
// and the 4 maddubs of a sub-block add up in int16 (at most 4 x 2 x 31 x 127 < 32767) before
// ONE madd with the 4 rows' scales: 40 integer multiplies per 4 rows x 256 elements x token
// instead of 64, and the integer multiplier is what limits these kernels on Zen 3 (tile shapes
// did not matter). Each (row, token) ends a super-block with the exact sums S and M and the same
// float tail as mac/mac_direct (finish_block), so results are bitwise those of decode.
struct Interleaved4Block {
  __m256i levels[8][4];  // [sub-block j][group g]: 4 rows x 8 levels
  __m256i scales[8];     // [j]: row r's scale in int16 lanes 4r .. 4r + 3
  __m256i mins[4];       // [row]: the min of each of the 16 bsums' sub-block
  __m128 d, neg_dmin;    // [row]
};




template <bool kFiveBit>
void interleave_block(const uint8_t* w, int64_t w_stride, int64_t s, Interleaved4Block& out) {
  using K = Q45KKernel<kFiveBit>;
  const uint8_t* p[4];
  alignas(16) float d[4], neg_dmin[4];
  int64_t scale_bytes[4];  // row r's 8 sub-block scales, one byte each
  for (int r = 0; r < 4; ++r) {
    p[r] = w + r * w_stride + s * K::kBlockBytes;
    d[r] = K::block_d(p[r]);
    neg_dmin[r] = K::block_neg_dmin(p[r]);
    uint64_t scales, min_bytes;
    unpack_scales_mins(p[r] + 4, &scales, &min_bytes);
    scale_bytes[r] = int64_t(scales);
    out.mins[r] = K::bsum_mins(min_bytes);
  }
  // Scale j of rows 0, 1 (bytes j, 8 + j of the low half) and 2, 3 (the high half), each zero-
  // extended into 4 int16 lanes: one byte shuffle per sub-block (control bytes >= 0x80 give 0).
  const __m256i all_scales = _mm256_setr_epi64x(scale_bytes[0], scale_bytes[1], scale_bytes[2], scale_bytes[3]);
  const __m256i spread = _mm256_setr_epi8(0, -128, 0, -128, 0, -128, 0, -128, 8, -128, 8, -128, 8, -128, 8, -128,
                                          0, -128, 0, -128, 0, -128, 0, -128, 8, -128, 8, -128, 8, -128, 8, -128);
  for (int j = 0; j < 8; ++j) {
    out.scales[j] = _mm256_shuffle_epi8(all_scales, _mm256_add_epi8(spread, _mm256_set1_epi8(char(j))));
  }
  for (int c = 0; c < 4; ++c) {
    __m256i even[4], odd[4];
    for (int r = 0; r < 4; ++r) K::levels_pair(p[r], c, &even[r], &odd[r]);
    interleave_rows(even, out.levels[2 * c]);
    interleave_rows(odd, out.levels[2 * c + 1]);
  }
  out.d = _mm_load_ps(d);
  out.neg_dmin = _mm_load_ps(neg_dmin);
}

template <bool kFiveBit>
struct Q45KInterleave : KquantInterleaveSteps {
  using Kernel = Q45KKernel<kFiveBit>;
  using Block = Interleaved4Block;
  static void interleave(const uint8_t* w, int64_t w_stride, int64_t s, int64_t /*k*/, Block& out) {
    interleave_block<kFiveBit>(w, w_stride, s, out);
  }
  // acc[t] (the 4 rows of token t) over super-block b, whose activations start at a[t].
  template <int T>
  static void step(const Block& b, const uint8_t* const a[T], __m128 acc[T]) {
    __m256i sums[T];
    for (int t = 0; t < T; ++t) sums[t] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      __m256i s16[T];
      for (int t = 0; t < T; ++t) s16[t] = _mm256_setzero_si256();
      for (int g = 0; g < 4; ++g) {
        const __m256i w = b.levels[j][g];
        for (int t = 0; t < T; ++t) {
          int64_t bytes;
          std::memcpy(&bytes, a[t] + Q8KLayout::kQs + 32 * j + 8 * g, 8);
          s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(w, _mm256_set1_epi64x(bytes)));
        }
      }
      for (int t = 0; t < T; ++t) sums[t] = _mm256_add_epi32(sums[t], _mm256_madd_epi16(s16[t], b.scales[j]));
    }
    for (int t = 0; t < T; ++t) {
      // Each row's S and M.
      const __m128i sum = row_sums4(sums[t]);
      const __m128i min_sum = dots4_epi16(b.mins, load256(a[t] + Q8KLayout::kBsums));
      const __m128 da = _mm_set1_ps(load_f32(a[t] + Q8KLayout::kScale));
      acc[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(sum), _mm_mul_ps(b.d, da), acc[t]);
      acc[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(min_sum), _mm_mul_ps(b.neg_dmin, da), acc[t]);
    }
  }
};

constexpr FormatKernels kQ4K{DType::Q4_K, Q8KLayout::row_bytes, convert_q8_k, interleaved_matmul<Q45KInterleave<false>>};
constexpr FormatKernels kQ5K{DType::Q5_K, Q8KLayout::row_bytes, convert_q8_k, interleaved_matmul<Q45KInterleave<true>>};
}  // namespace

const FormatKernels* avx2_kquant_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::Q4_K: return &kQ4K;
    case DType::Q5_K: return &kQ5K;
    default: return avx2_kquant16_kernels(weight_type);
  }
}

}  // namespace kestrel::cpu
