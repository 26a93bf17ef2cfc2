// AVX2 kernels for the k-quants Q3_K, Q4_K, Q5_K and Q6_K against Q8_K activations
// (kernels_q8k_common.h, all in the one plain layout, so a layer's Q4_K and Q6_K matrices share one
// conversion): unsigned levels in element order, one 32-element sub-block (Q4_K/Q5_K) or two
// 16-element ones (Q6_K, Q3_K) per 256-bit vector, maddubs with the signed activations, madd with
// the sub-block scales (AVX2 has neither dpbusd nor GFNI, which the AVX-512 lane-major design
// uses). Q4_K/Q5_K subtract dmin * min * bsum; Q6_K, stored as q + 32, subtracts 32 * scale * bsum
// per 16-element group (Q3_K, stored as q + 4: 4 * scale * bsum), both through one madd with the
// activation's bsums. The AVX-512 table uses the Q3_K kernel too (it has no lane-major one yet).
//
// Every path reduces a super-block to its exact integer sums per (row, token) and ends with the
// same scalar FMAs (the kernels' finish_block), so decode, small batches and the interleaved
// prefill tiles (interleaved_matmul, kernels_interleave_avx2.h: 4 rows interleaved 8 bytes at a time, so several
// maddubs share one madd with the scales) give bitwise the same results. One Zen 3 core, n = 512:
// Q4_K 78-85 -> 97-133 GFLOP/s, Q6_K 97-100 -> 112-122. Decode (n = 1) runs 2 rows at a time
// through mac_direct2, which decodes and multiplies 32 bytes at a time without storing the
// decoded block and reduces both rows' sums in one hadd tree; sub-block scales come from one
// vector by a byte shuffle each, not a broadcast each.
#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_q8k_common.h"
#include "backend/cpu/kernels_simd_avx2.h"
#include "backend/cpu/kernels_interleave_avx2.h"
#include "backend/cpu/kernels_tile.h"

namespace kestrel::cpu {
namespace {

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// An activation super-block, read in place.
struct KquantActivation {
  const uint8_t* block;
  __m256i q(int v) const { return load256(block + Q8KLayout::kQs + 32 * v); }
  __m256i bsums() const { return load256(block + Q8KLayout::kBsums); }
  float d() const { return load_f32(block + Q8KLayout::kScale); }
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
  // The 8 sub-block scales (int16, in both 128-bit lanes) and the mins widened for the bsums madd.
  static void block_scales(const uint8_t* p, __m256i* scales8, __m256i* mins) {
    uint64_t scales, min_bytes;
    unpack_scales_mins(p + 4, &scales, &min_bytes);
    *scales8 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(scales))));
    *mins = bsum_mins(min_bytes);
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
    finish_block(acc, lanes, _mm256_madd_epi16(w.mins, a.bsums()), w.d, w.neg_dmin, a);
  }
  // The integer lanes of S and of M for super-block p, decoding 32 bytes at a time.
  static void direct_sums(const uint8_t* p, const A& a, __m256i* sum_lanes, __m256i* min_lanes) {
    __m256i scales8, mins;
    block_scales(p, &scales8, &mins);
    __m256i lanes = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      __m256i even, odd;
      levels_pair(p, c, &even, &odd);
      lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(_mm256_maddubs_epi16(even, a.q(2 * c)), spread_scale(scales8, 2 * c)));
      lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(_mm256_maddubs_epi16(odd, a.q(2 * c + 1)), spread_scale(scales8, 2 * c + 1)));
    }
    *sum_lanes = lanes;
    *min_lanes = _mm256_madd_epi16(mins, a.bsums());
  }
  // load_w + mac for one token (see the top).
  static void mac_direct(Acc& acc, const uint8_t* row, int64_t s, const A& a) {
    const uint8_t* p = row + s * kBlockBytes;
    __m256i sum_lanes, min_lanes;
    direct_sums(p, a, &sum_lanes, &min_lanes);
    finish_block(acc, sum_lanes, min_lanes, block_d(p), block_neg_dmin(p), a);
  }
  // mac_direct for two rows, their four sums reduced together (decode runs 2 rows at a time):
  // the same float operations per row, in vector lanes.
  static void mac_direct2(Acc& acc0, Acc& acc1, const uint8_t* row0, const uint8_t* row1, int64_t s, const A& a) {
    const uint8_t* p0 = row0 + s * kBlockBytes;
    const uint8_t* p1 = row1 + s * kBlockBytes;
    __m256i sum0, min0, sum1, min1;
    direct_sums(p0, a, &sum0, &min0);
    direct_sums(p1, a, &sum1, &min1);
    // S0 S1 M0 M1, from lanes 0-3 and 4-7 of one hadd tree.
    const __m256i quads = _mm256_hadd_epi32(_mm256_hadd_epi32(sum0, sum1), _mm256_hadd_epi32(min0, min1));
    const __m128 sums = _mm_cvtepi32_ps(_mm_add_epi32(_mm256_castsi256_si128(quads), _mm256_extracti128_si256(quads, 1)));
    const __m128 scale = _mm_mul_ps(_mm_setr_ps(block_d(p0), block_d(p1), block_neg_dmin(p0), block_neg_dmin(p1)),
                                    _mm_set1_ps(a.d()));
    __m128 acc = _mm_setr_ps(acc0, acc1, 0.0f, 0.0f);
    acc = _mm_fmadd_ps(sums, scale, acc);
    acc = _mm_fmadd_ps(_mm_movehl_ps(sums, sums), _mm_movehl_ps(scale, scale), acc);
    acc0 = _mm_cvtss_f32(acc);
    acc1 = _mm_cvtss_f32(_mm_movehdup_ps(acc));
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

constexpr int64_t kInterleavedChunk = 8;  // super-blocks decoded at a time: 11.5 KB

// (sum of row r's int32 lanes 2r, 2r + 1 of v) for rows 0..3: the interleaved tiles' layout.
inline __m128i row_sums4(__m256i v) {
  const __m256i pairs = _mm256_hadd_epi32(v, v);
  return _mm_unpacklo_epi64(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
}

// (x[0] . b, x[1] . b, x[2] . b, x[3] . b) over 16 int16 lanes each, as exact int32 sums.
inline __m128i dots4_epi16(const __m256i x[4], __m256i b) {
  const __m256i x01 = _mm256_hadd_epi32(_mm256_madd_epi16(x[0], b), _mm256_madd_epi16(x[1], b));
  const __m256i x23 = _mm256_hadd_epi32(_mm256_madd_epi16(x[2], b), _mm256_madd_epi16(x[3], b));
  const __m256i quads = _mm256_hadd_epi32(x01, x23);
  return _mm_add_epi32(_mm256_castsi256_si128(quads), _mm256_extracti128_si256(quads, 1));
}

// What the k-quant interleaves share (kernels_interleave_avx2.h): a step is one super-block, and a
// token's accumulator holds the 4 rows' sums.
struct KquantInterleaveSteps {
  using Acc = __m128;
  static constexpr int64_t kChunk = kInterleavedChunk;
  static constexpr int64_t kActStepBytes = Q8KLayout::kBlockBytes;
  static int64_t steps(int64_t k) { return k / 256; }
  static Acc zero() { return _mm_setzero_ps(); }
  static void store(Acc acc, float* y) { _mm_storeu_ps(y, acc); }
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

// The symmetric k-quants, Q6_K and Q3_K: element e of a super-block is q_e - offset (Q6_K: 6-bit q,
// offset 32; Q3_K: 3-bit q, offset 4) times the int8 scale of its 16-element group. The levels stay
// q (unsigned, so maddubs takes them as its unsigned operand against the signed activations) and
// offset * sum_g scale_g * bsum_g comes off. A Layout gives a format's bytes: its levels, its 16
// group scales as int8 and its d.
struct Q6KLayout {
  static constexpr int64_t kBlockBytes = 210;
  static constexpr int kOffsetShift = 5;  // offset 32
  static __m128i scales_i8(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192)); }
  static float block_d(const uint8_t* p) { return fp16_to_f32(load_u16(p + 208)); }
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
};

// Q3_K (quant/blocks.h): hmask[32], qs[64], 12 bytes of 6-bit scale codes, d.
struct Q3KLayout {
  static constexpr int64_t kBlockBytes = 110;
  static constexpr int kOffsetShift = 2;  // offset 4
  // Code j: low 4 bits in byte j % 8 (low nibble for j < 8), top 2 in byte 8 + j % 4 at 2 (j / 4);
  // four codes per 32-bit word, minus 32.
  static __m128i scales_i8(const uint8_t* p) {
    uint32_t a0, a1, top;
    std::memcpy(&a0, p + 96, 4);
    std::memcpy(&a1, p + 100, 4);
    std::memcpy(&top, p + 104, 4);
    const uint32_t low4 = 0x0f0f0f0fu, top2 = 0x03030303u;
    const __m128i codes = _mm_setr_epi32(int((a0 & low4) | (top & top2) << 4), int((a1 & low4) | ((top >> 2) & top2) << 4),
                                         int(((a0 >> 4) & low4) | ((top >> 4) & top2) << 4),
                                         int(((a1 >> 4) & low4) | ((top >> 6) & top2) << 4));
    return _mm_sub_epi8(codes, _mm_set1_epi8(32));
  }
  static float block_d(const uint8_t* p) { return fp16_to_f32(load_u16(p + 108)); }
  // Element 128h + 32k + l: low 2 bits at bits 2k of qs[32h + l], high bit at bit 4h + k of hmask[l].
  static void levels_half(const uint8_t* p, int h, __m256i out[4]) {
    const __m256i qs = load256(p + 32 + 32 * h), hmask = load256(p);
    const __m256i two = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    for (int k = 0; k < 4; ++k) {
      const __m256i low = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * k), two);
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hmask, 4 * h + k), one);
      out[k] = _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
    }
  }
};

template <typename Layout>
struct SymmetricKKernel {
  static constexpr int64_t kBlockBytes = Layout::kBlockBytes, kStepBytes = kBlockBytes;
  static constexpr int kRows = 4, kTokens = 2, kDecodeRows = 2;  // n >= 4: SymmetricKInterleave (below)
  using Acc = float;
  using A = KquantActivation;
  struct W {
    __m256i levels[8];  // q; vector 4h + q: elements 128h + 32q .. + 31
    __m256i scales[8];  // sub-block scale of each int16 pair (two sub-blocks per vector)
    __m256i scales16;   // the 16 group scales as int16, for the bsums correction
    float d;
  };
  static int64_t steps(int64_t k) { return k / 256; }
  static int64_t direct_steps(int64_t k) { return k / 256; }
  static Acc zero() { return 0.0f; }

  // The 16 group scales as int16 (group g in lane g).
  static __m256i group_scales(const uint8_t* p) { return _mm256_cvtepi8_epi16(Layout::scales_i8(p)); }
  // Vector v's scales: group 2v's scale in its low 128 bits, group 2v + 1's in its high ones.
  static __m256i vector_scales(__m256i scales16, int v) {
    // Dword v holds (scale 2v, scale 2v + 1); copy it everywhere, then spread within each lane.
    const __m256i pair = _mm256_permutevar8x32_epi32(scales16, _mm256_set1_epi32(v));
    return _mm256_shuffle_epi8(pair, _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                                      2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3));
  }
  static void levels_half(const uint8_t* p, int h, __m256i out[4]) { Layout::levels_half(p, h, out); }
  static float block_d(const uint8_t* p) { return Layout::block_d(p); }
  // lanes - offset * sum_g scale_g * bsum_g: the integer lanes of the super-block's exact sum S.
  static __m256i corrected(__m256i lanes, __m256i scales16, const A& a) {
    return _mm256_sub_epi32(lanes, _mm256_slli_epi32(_mm256_madd_epi16(scales16, a.bsums()), Layout::kOffsetShift));
  }
  // acc = fma(S, d * d_a, acc) with S's int32 lanes: the float tail of every path (mac,
  // mac_direct(2), the interleaved tiles), so all give bitwise the same result.
  static void finish_block(Acc& acc, __m256i sum_lanes, float d, const A& a) {
    acc = fma1(float(hsum_epi32(sum_lanes)), d * a.d(), acc);
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
    finish_block(acc, corrected(lanes, w.scales16, a), w.d, a);
  }
  // The integer lanes of S for super-block p, decoding half a super-block at a time.
  static __m256i direct_lanes(const uint8_t* p, const A& a) {
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
    return corrected(lanes, scales16, a);
  }
  // load_w + mac for one token (see the top).
  static void mac_direct(Acc& acc, const uint8_t* row, int64_t s, const A& a) {
    const uint8_t* p = row + s * kBlockBytes;
    finish_block(acc, direct_lanes(p, a), block_d(p), a);
  }
  // mac_direct for two rows, their sums reduced together.
  static void mac_direct2(Acc& acc0, Acc& acc1, const uint8_t* row0, const uint8_t* row1, int64_t s, const A& a) {
    const uint8_t* p0 = row0 + s * kBlockBytes;
    const uint8_t* p1 = row1 + s * kBlockBytes;
    const __m128i quads = lane_sums2(direct_lanes(p0, a), direct_lanes(p1, a));  // S0 S1 S0 S1
    const __m128 scale = _mm_mul_ps(_mm_setr_ps(block_d(p0), block_d(p1), 0.0f, 0.0f), _mm_set1_ps(a.d()));
    const __m128 acc = _mm_fmadd_ps(_mm_cvtepi32_ps(quads), scale, _mm_setr_ps(acc0, acc1, 0.0f, 0.0f));
    acc0 = _mm_cvtss_f32(acc);
    acc1 = _mm_cvtss_f32(_mm_movehdup_ps(acc));
  }
  static float finish(Acc acc, const uint8_t*) { return acc; }
};

// Q6_K/Q3_K prefill tiles: as Q4_K's (Interleaved4Block), 4 rows interleaved 8 bytes at a time; a
// 16-element group is 2 vectors whose maddubs add up in int16 (2 x 2 x 63 x 127 < 32767) before
// one madd with the 4 rows' group scales: 48 integer multiplies per 4 rows x 256 x token
// instead of 64, plus 4 for the bsums correction.
struct Interleaved4Q6Block {
  __m256i levels[8][4];  // [v][g]: elements 32v + 8g .. + 7 of rows 0, 1, 2, 3
  __m256i scales[16];    // [group]: row r's scale (sign-extended) in int16 lanes 4r .. 4r + 3
  __m256i scales16[4];   // [row]: its 16 group scales, for the bsums correction
  __m128 d;              // [row]
};

template <typename Layout>
struct SymmetricKInterleave : KquantInterleaveSteps {
  using Kernel = SymmetricKKernel<Layout>;
  using Block = Interleaved4Q6Block;
  static void interleave(const uint8_t* w, int64_t w_stride, int64_t s, int64_t /*k*/, Block& out) {
    const uint8_t* p[4];
    __m128i scales8[4];  // [row]: its 16 group scales as int8
    alignas(16) float d[4];
    for (int r = 0; r < 4; ++r) {
      p[r] = w + r * w_stride + s * Kernel::kBlockBytes;
      d[r] = Kernel::block_d(p[r]);
      scales8[r] = Layout::scales_i8(p[r]);  // decoded once (Q3_K packs them in 6 bits)
      out.scales16[r] = _mm256_cvtepi8_epi16(scales8[r]);
    }
    for (int h = 0; h < 2; ++h) {
      __m256i levels[4][4];  // [row][q]
      for (int r = 0; r < 4; ++r) Kernel::levels_half(p[r], h, levels[r]);
      for (int q = 0; q < 4; ++q) {
        const __m256i rows[4] = {levels[0][q], levels[1][q], levels[2][q], levels[3][q]};
        interleave_rows(rows, out.levels[4 * h + q]);
      }
    }
    // Group scale G of rows 0 and 2 (from `even`: row 0 | row 2) into the high byte of int16 lanes
    // 0-3 of each half, of rows 1 and 3 (`odd`) into lanes 4-7; an arithmetic shift sign-extends.
    const __m256i even = _mm256_set_m128i(scales8[2], scales8[0]);
    const __m256i odd = _mm256_set_m128i(scales8[3], scales8[1]);
    const __m256i first = _mm256_setr_epi8(-128, 0, -128, 0, -128, 0, -128, 0, -128, -128, -128, -128, -128, -128, -128, -128,
                                           -128, 0, -128, 0, -128, 0, -128, 0, -128, -128, -128, -128, -128, -128, -128, -128);
    const __m256i second = _mm256_setr_epi8(-128, -128, -128, -128, -128, -128, -128, -128, -128, 0, -128, 0, -128, 0, -128, 0,
                                            -128, -128, -128, -128, -128, -128, -128, -128, -128, 0, -128, 0, -128, 0, -128, 0);
    for (int g = 0; g < 16; ++g) {
      const __m256i add = _mm256_set1_epi8(char(g));
      const __m256i high = _mm256_or_si256(_mm256_shuffle_epi8(even, _mm256_add_epi8(first, add)),
                                           _mm256_shuffle_epi8(odd, _mm256_add_epi8(second, add)));
      out.scales[g] = _mm256_srai_epi16(high, 8);
    }
    out.d = _mm_load_ps(d);
  }
  // acc[t] (the 4 rows of token t) over super-block b, whose activations start at a[t].
  template <int T>
  static void step(const Block& b, const uint8_t* const a[T], __m128 acc[T]) {
    __m256i sums[T];
    for (int t = 0; t < T; ++t) sums[t] = _mm256_setzero_si256();
    for (int group = 0; group < 16; ++group) {
      const __m256i w0 = b.levels[group / 2][2 * (group % 2)], w1 = b.levels[group / 2][2 * (group % 2) + 1];
      for (int t = 0; t < T; ++t) {
        int64_t lo, hi;
        std::memcpy(&lo, a[t] + Q8KLayout::kQs + 16 * group, 8);
        std::memcpy(&hi, a[t] + Q8KLayout::kQs + 16 * group + 8, 8);
        const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(w0, _mm256_set1_epi64x(lo)),
                                             _mm256_maddubs_epi16(w1, _mm256_set1_epi64x(hi)));
        sums[t] = _mm256_add_epi32(sums[t], _mm256_madd_epi16(s16, b.scales[group]));
      }
    }
    for (int t = 0; t < T; ++t) {
      // Each row's sum minus offset * its scales . bsums.
      const __m128i correction = dots4_epi16(b.scales16, load256(a[t] + Q8KLayout::kBsums));
      const __m128i total = _mm_sub_epi32(row_sums4(sums[t]), _mm_slli_epi32(correction, Layout::kOffsetShift));
      const __m128 da = _mm_set1_ps(load_f32(a[t] + Q8KLayout::kScale));
      acc[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(total), _mm_mul_ps(b.d, da), acc[t]);
    }
  }
};

constexpr FormatKernels kQ4K{DType::Q4_K, Q8KLayout::row_bytes, convert_q8_k, interleaved_matmul<Q45KInterleave<false>>};
constexpr FormatKernels kQ5K{DType::Q5_K, Q8KLayout::row_bytes, convert_q8_k, interleaved_matmul<Q45KInterleave<true>>};
constexpr FormatKernels kQ6K{DType::Q6_K, Q8KLayout::row_bytes, convert_q8_k,
                             interleaved_matmul<SymmetricKInterleave<Q6KLayout>>};
constexpr FormatKernels kQ3K{DType::Q3_K, Q8KLayout::row_bytes, convert_q8_k,
                             interleaved_matmul<SymmetricKInterleave<Q3KLayout>>};

}  // namespace

const FormatKernels* avx2_kquant_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::Q4_K: return &kQ4K;
    case DType::Q5_K: return &kQ5K;
    case DType::Q6_K: return &kQ6K;
    case DType::Q3_K: return &kQ3K;
    default: return nullptr;
  }
}

const FormatKernels* avx2_kquant_kernels_without_avx512(DType weight_type) {
  return weight_type == DType::Q3_K ? &kQ3K : nullptr;
}

}  // namespace kestrel::cpu
