// The AVX2 kernel and 4-row interleaved prefill tile for super-blocks of 256 values in 16 groups of
// 16 with an int8 scale per group, against Q8_K activations: each element is d x scale_g x (level -
// offset) with unsigned levels <= 63 (or, Layout::kHasMins, d x scale_g x level - dmin x min_g).
// maddubs takes the levels as its unsigned operand; offset x sum_g scale_g x bsum_g (or the mins'
// part) comes off once per super-block. Layouts: Q6_K, Q3_K, Q2_K (kernels_kquant16_avx2.cpp) and
// the 3-bit grid formats IQ3_XXS / IQ3_S (kernels_iq3_avx2.cpp). A Layout supplies kBlockBytes,
// kHasMins, kOffsetShift (offset = 1 << shift), scales_i8 (the 16 group scales), block_d,
// levels_half (elements 128h .. 128h + 127 as four vectors) and, with mins, mins_u8 and
// block_neg_dmin; optionally direct_lanes (one token's S, see below). AVX2 code with internal
// linkage (kernels_tile.h), included by those files only.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/kernels_interleave_avx2.h"
#include "backend/cpu/kernels_kquant_avx2.h"
#include "backend/cpu/kernels_q8k_common.h"
#include "backend/cpu/kernels_simd_avx2.h"

namespace kestrel::cpu {
namespace {

// Q6_K, Q3_K (symmetric: an integer offset per level) and Q2_K (affine: Layout::kHasMins).
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
    __m256i mins16;     // Q2_K: the 16 group mins as int16
    float d, neg_dmin;
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
  static float block_neg_dmin(const uint8_t* p) {
    if constexpr (Layout::kHasMins) return Layout::block_neg_dmin(p);
    return 0.0f;
  }
  static __m256i group_mins(const uint8_t* p) {
    if constexpr (Layout::kHasMins) return _mm256_cvtepu8_epi16(Layout::mins_u8(p));
    return _mm256_setzero_si256();
  }
  // Symmetric: lanes - offset * sum_g scale_g * bsum_g, the integer lanes of the super-block's exact
  // sum S. Affine (Q2_K): the lanes are S already.
  static __m256i corrected(__m256i lanes, __m256i scales16, const A& a) {
    if constexpr (Layout::kHasMins) return lanes;
    return _mm256_sub_epi32(lanes, _mm256_slli_epi32(_mm256_madd_epi16(scales16, a.bsums()), Layout::kOffsetShift));
  }
  // acc = fma(S, d * d_a, acc), then for Q2_K acc = fma(M, -dmin * d_a, acc) (M = mins . bsums),
  // with S's and M's int32 lanes: the float tail of every path (mac, mac_direct(2), the interleaved
  // tiles), so all give bitwise the same result.
  static void finish_block(Acc& acc, __m256i sum_lanes, __m256i min_lanes, float d, float neg_dmin, const A& a) {
    if constexpr (Layout::kHasMins) {
      const __m128i sums = lane_sums2(sum_lanes, min_lanes);  // S, M, S, M
      acc = fma1(float(_mm_cvtsi128_si32(sums)), d * a.d(), acc);
      acc = fma1(float(_mm_extract_epi32(sums, 1)), neg_dmin * a.d(), acc);
    } else {
      (void)min_lanes, (void)neg_dmin;
      acc = fma1(float(hsum_epi32(sum_lanes)), d * a.d(), acc);
    }
  }
  static __m256i min_lanes(__m256i mins16, const A& a) {
    if constexpr (Layout::kHasMins) return _mm256_madd_epi16(mins16, a.bsums());
    return _mm256_setzero_si256();
  }

  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    W w;
    w.d = block_d(p);
    w.neg_dmin = block_neg_dmin(p);
    w.scales16 = group_scales(p);
    w.mins16 = group_mins(p);
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
    finish_block(acc, corrected(lanes, w.scales16, a), min_lanes(w.mins16, a), w.d, w.neg_dmin, a);
  }
  // The integer lanes of S for super-block p, decoding half a super-block at a time.
  // A Layout may compute them its own way (Layout::direct_lanes): any int32 lanes whose total is S
  // give the same float tail, so decode still equals the tiles bit for bit.
  static __m256i direct_lanes(const uint8_t* p, const A& a) {
    if constexpr (requires { Layout::direct_lanes(p, a); }) return Layout::direct_lanes(p, a);
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
    finish_block(acc, direct_lanes(p, a), min_lanes(group_mins(p), a), block_d(p), block_neg_dmin(p), a);
  }
  // mac_direct for two rows, their sums reduced together and their accumulators in vector lanes
  // 0 and 1 (kernels_tile.h).
  static void mac_direct2_lanes(__m128& pair, const uint8_t* row0, const uint8_t* row1, int64_t s, const A& a) {
    const uint8_t* p0 = row0 + s * kBlockBytes;
    const uint8_t* p1 = row1 + s * kBlockBytes;
    if constexpr (Layout::kHasMins) {
      fma_affine_lanes(pair, direct_lanes(p0, a), direct_lanes(p1, a), min_lanes(group_mins(p0), a),
                       min_lanes(group_mins(p1), a),
                       _mm_mul_ps(_mm_setr_ps(block_d(p0), block_d(p1), block_neg_dmin(p0), block_neg_dmin(p1)),
                                  _mm_set1_ps(a.d())));
      return;
    }
    const __m128i quads = lane_sums2(direct_lanes(p0, a), direct_lanes(p1, a));  // S0 S1 S0 S1
    const __m128 scale = _mm_mul_ps(_mm_setr_ps(block_d(p0), block_d(p1), 0.0f, 0.0f), _mm_set1_ps(a.d()));
    pair = _mm_fmadd_ps(_mm_cvtepi32_ps(quads), scale, pair);
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
  __m256i mins16[4];     // [row]: Q2_K's 16 group mins
  __m128 d, neg_dmin;    // [row]
};

template <typename Layout>
struct SymmetricKInterleave : KquantInterleaveSteps {
  using Kernel = SymmetricKKernel<Layout>;
  using Block = Interleaved4Q6Block;
  static void interleave(const uint8_t* w, int64_t w_stride, int64_t s, int64_t /*k*/, Block& out) {
    const uint8_t* p[4];
    __m128i scales8[4];  // [row]: its 16 group scales as int8
    alignas(16) float d[4], neg_dmin[4];
    for (int r = 0; r < 4; ++r) {
      p[r] = w + r * w_stride + s * Kernel::kBlockBytes;
      d[r] = Kernel::block_d(p[r]);
      neg_dmin[r] = Kernel::block_neg_dmin(p[r]);
      out.mins16[r] = Kernel::group_mins(p[r]);
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
    out.neg_dmin = _mm_load_ps(neg_dmin);
  }
  // sums[t]: per row (int32 pairs, row_sums4 adds them) sum over the 16 groups of scale_g * levels . a.
  template <int T>
  static void scaled_level_sums(const Block& b, const uint8_t* const a[T], __m256i sums[T]) {
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
  }
  // acc[t] (the 4 rows of token t) over super-block b, whose activations start at a[t].
  template <int T>
  static void step(const Block& b, const uint8_t* const a[T], __m128 acc[T]) {
    if constexpr (Layout::kHasMins) {
      step_affine<T>(b, a, acc);
      return;
    }
    __m256i sums[T];
    scaled_level_sums<T>(b, a, sums);
    for (int t = 0; t < T; ++t) {
      // Each row's sum minus offset * its scales . bsums.
      const __m128i correction = dots4_epi16(b.scales16, load256(a[t] + Q8KLayout::kBsums));
      const __m128i total = _mm_sub_epi32(row_sums4(sums[t]), _mm_slli_epi32(correction, Layout::kOffsetShift));
      const __m128 da = _mm_set1_ps(load_f32(a[t] + Q8KLayout::kScale));
      acc[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(total), _mm_mul_ps(b.d, da), acc[t]);
    }
  }
  // Q2_K: S per row as above without the offset, then M = mins . bsums, in finish_block's order.
  template <int T>
  static void step_affine(const Block& b, const uint8_t* const a[T], __m128 acc[T]) {
    __m256i sums[T];
    scaled_level_sums<T>(b, a, sums);
    for (int t = 0; t < T; ++t) {
      const __m128i min_sum = dots4_epi16(b.mins16, load256(a[t] + Q8KLayout::kBsums));
      const __m128 da = _mm_set1_ps(load_f32(a[t] + Q8KLayout::kScale));
      acc[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(row_sums4(sums[t])), _mm_mul_ps(b.d, da), acc[t]);
      acc[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(min_sum), _mm_mul_ps(b.neg_dmin, da), acc[t]);
    }
  }
};

}  // namespace
}  // namespace kestrel::cpu
