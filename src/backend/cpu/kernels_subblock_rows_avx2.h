// The AVX2 prefill tile for the Q8_K formats whose decoded sub-block is a magnitude, a sign source
// and a scale (IQ4_XS in kernels_iq4_avx2.cpp; IQ3_XXS/IQ3_S, whose levels fit the unsigned
// offset form, use kernels_kquant16_avx2.h's faster tile instead): the
// sign trick (maddubs(magnitude, sign(q_a, source))) needs each product on its own madd with the
// scale, so interleaving rows saves no multiplies; what pays is loading each decoded vector once
// for 4 tokens and each activation vector once for 2 rows. For batches of at least
// kInterleavedTokens tokens (kernels_interleave_avx2.h), 4 rows' super-blocks are decoded by
// K::load_w once per token block into an L1 buffer, and each token's 4 rows keep K's float-lane
// accumulators, ending every super-block with K::finish_block: lane for lane the integer sums and
// float operations of K's own paths, so results are bitwise those of decode.
//
// K (a row-major policy, kernels_tile.h) supplies: W {magnitude[8], sign[8], scale[8], d}, A {block},
// load_w, sub_block(magnitude, sign, scale, q) -> int32 lanes, finish_block(acc, lanes, d, a), Acc
// (__m256). Internal linkage; included by AVX2 kernel files only.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/kernels_interleave_avx2.h"
#include "backend/cpu/kernels_q8k_common.h"
#include "backend/cpu/kernels_simd_avx2.h"

namespace kestrel::cpu {
namespace {

template <class K>
struct SubBlockRows4 {
  using Kernel = K;
  struct Block {
    __m256i magnitude[4][8], sign[4][8], scale[4][8];  // [row][sub-block]
    float d[4];                                        // [row]
  };
  struct Acc {
    __m256 row[4];  // each row's K::Acc
  };
  static constexpr int64_t kChunk = 4;  // 4 x 3 KB of decoded super-blocks
  static constexpr int64_t kActStepBytes = Q8KLayout::kBlockBytes;
  static int64_t steps(int64_t k) { return k / 256; }
  static Acc zero() { return {{_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()}}; }
  static void store(const Acc& acc, float* y) {
    for (int r = 0; r < 4; ++r) y[r] = hsum(acc.row[r]);
  }
  static void interleave(const uint8_t* w, int64_t w_stride, int64_t s, int64_t /*k*/, Block& out) {
    for (int r = 0; r < 4; ++r) {
      const typename K::W row = K::load_w(w + r * w_stride, s);
      for (int j = 0; j < 8; ++j) {
        out.magnitude[r][j] = row.magnitude[j];
        out.sign[r][j] = row.sign[j];
        out.scale[r][j] = row.scale[j];
      }
      out.d[r] = row.d;
    }
  }
  // acc[t] (the 4 rows of token t) over super-block b, whose activations start at a[t]: 2 rows at a
  // time, their 2 x T int32 accumulators, T activation vectors and 3 decoded ones in 15 registers.
  template <int T>
  static void step(const Block& b, const uint8_t* const a[T], Acc acc[T]) {
    for (int r0 = 0; r0 < 4; r0 += 2) {
      __m256i lanes[2][T];
      for (int r = 0; r < 2; ++r) {
        for (int t = 0; t < T; ++t) lanes[r][t] = _mm256_setzero_si256();
      }
      for (int j = 0; j < 8; ++j) {
        __m256i q[T];
        for (int t = 0; t < T; ++t) {
          q[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t] + Q8KLayout::kQs + 32 * j));
        }
        for (int r = 0; r < 2; ++r) {
          const __m256i magnitude = b.magnitude[r0 + r][j], sign = b.sign[r0 + r][j], scale = b.scale[r0 + r][j];
          for (int t = 0; t < T; ++t) {
            lanes[r][t] = _mm256_add_epi32(lanes[r][t], K::sub_block(magnitude, sign, scale, q[t]));
          }
        }
      }
      for (int t = 0; t < T; ++t) {
        const typename K::A act{a[t]};
        for (int r = 0; r < 2; ++r) K::finish_block(acc[t].row[r0 + r], lanes[r][t], b.d[r0 + r], act);
      }
    }
  }
};

}  // namespace
}  // namespace kestrel::cpu
