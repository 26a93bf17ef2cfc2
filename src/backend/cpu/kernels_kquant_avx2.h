// What the AVX2 k-quant kernel files share (kernels_kquant_avx2.cpp: Q4_K/Q5_K;
// kernels_kquant16_avx2.cpp: the 16-element-group formats Q6_K, Q3_K, Q2_K): the Q8_K activation
// block read in place and the pieces of the 4-row interleaved prefill tiles. AVX2 code with internal
// linkage (kernels_tile.h), included by those two files only.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/kernels_q8k_common.h"
#include "backend/cpu/kernels_simd_avx2.h"

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

// Two rows' direct-path super-block: acc_r += S_r * d_r * d_a + M_r * (-dmin_r) * d_a, where S_r
// and M_r are the int32 lane sums of sum_r and min_r and scale = (d_0, d_1, -dmin_0, -dmin_1) * d_a.
// S0 S1 M0 M1 come from one hadd tree; two FMAs per row in the order finish_block uses. The two
// accumulators are lanes 0 and 1 of `pair` (lanes 2 and 3 are scratch).
inline void fma_affine_lanes(__m128& pair, __m256i sum0, __m256i sum1, __m256i min0, __m256i min1, __m128 scale) {
  const __m256i quads = _mm256_hadd_epi32(_mm256_hadd_epi32(sum0, sum1), _mm256_hadd_epi32(min0, min1));
  const __m128 sums = _mm_cvtepi32_ps(_mm_add_epi32(_mm256_castsi256_si128(quads), _mm256_extracti128_si256(quads, 1)));
  pair = _mm_fmadd_ps(sums, scale, pair);
  pair = _mm_fmadd_ps(_mm_movehl_ps(sums, sums), _mm_movehl_ps(scale, scale), pair);
}
// (d_0, d_1, -dmin_0, -dmin_1) * d_a, the scale of fma_affine_lanes, from the fp16 pairs (d, dmin)
// at p0 and p1 (the start of a Q4_K / Q5_K super-block): one conversion for both rows.
inline __m128 affine_scales2(const uint8_t* p0, const uint8_t* p1, float d_a) {
  uint32_t h0, h1;
  std::memcpy(&h0, p0, 4);
  std::memcpy(&h1, p1, 4);
  const __m128i halves = _mm_unpacklo_epi32(_mm_cvtsi32_si128(int(h0)), _mm_cvtsi32_si128(int(h1)));  // d0 m0 d1 m1
  const __m128 dm = _mm_cvtph_ps(_mm_shufflelo_epi16(halves, _MM_SHUFFLE(3, 1, 2, 0)));             // d0 d1 m0 m1
  const __m128 negate_mins = _mm_castsi128_ps(_mm_setr_epi32(0, 0, int(0x80000000u), int(0x80000000u)));
  return _mm_mul_ps(_mm_xor_ps(dm, negate_mins), _mm_set1_ps(d_a));
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

}  // namespace
}  // namespace kestrel::cpu
