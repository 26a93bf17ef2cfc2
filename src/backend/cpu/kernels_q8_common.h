// Activation quantization shared by the AVX2 and AVX-512 kernels of the formats that dot with Q8_0
// or Q8_1 activations (Q8_0, Q4_0/1, Q5_0/1, INT8_PC, INT4_SYM_G*, INT4_ASYM_G*): the grouped
// layout below (kernels_q8_avx2.cpp, kernels_q8_avx512.cpp) and the loop over block pairs the
// AVX2 block-pair layouts use (kernels_q8_0_avx2.cpp, kernels_q4_0_avx2.cpp). AVX2 code with
// internal linkage (see kernels_tile.h), so each includer compiles its own copy.
//
// The values are bit for bit those of quant's quantize_row_q8_0 (Q8_0: d = amax / 127, q rounded
// half away from zero) or quantize_row_q8_1 (Q8_1: ties to even, clamped, plus s = F16(d sum q)),
// laid out for the kernels in groups of NB blocks of 32 (NB = 4 for 512-bit vectors, 2 for 256):
//   qs_a[16 NB]   elements 0..15 of each block of the group, block after block
//   qs_b[16 NB]   elements 16..31 of each block
//   corr[4 NB]    int32, lane 4j + l = -C * (sum of the 8 q's that lane l of block j sees: elements
//                 4l..4l+3 and 16+4l..16+4l+3): the kernels multiply unsigned weights (level =
//                 q + C) with signed activations and start each lane's integer sum from corr, so
//                 every lane ends with its exact, small share of the block's dot product
//   da[4 NB]      F32, lanes 4j..4j+3 = the block's scale (F16-rounded, as the reference uses it)
//   s[4 NB]       Q8_1 only: lane 4j = the block's s (F16-rounded), other lanes 0
// So lane l of a 16 NB-byte vector, and lane l of corr/da/s, always belong to block l / 4. A
// partial group at the end of a row is zero-filled.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace kestrel::cpu {
namespace {

template <int NB, bool kQ81>
struct Q8Layout {
  static constexpr int kBlocks = NB;
  static constexpr int64_t kGroupElements = 32 * NB;
  static constexpr int64_t kQsA = 0, kQsB = 16 * NB, kCorr = 32 * NB, kScale = 48 * NB, kSum = 64 * NB;
  static constexpr int64_t kGroupBytes = kQ81 ? 80 * NB : 64 * NB;
  static int64_t row_bytes(int64_t k) { return (k + kGroupElements - 1) / kGroupElements * kGroupBytes; }
};

inline float max_abs8(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  // max(|x|, acc) keeps acc when x is NaN, as std::max(amax, |x|) in the reference does.
  __m256 m = _mm256_max_ps(_mm256_andnot_ps(sign, b), _mm256_andnot_ps(sign, a));
  m = _mm256_max_ps(_mm256_andnot_ps(sign, c), m);
  m = _mm256_max_ps(_mm256_andnot_ps(sign, d), m);
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// Rounds to the nearest integer, halves away from zero (std::lround).
inline __m256 round_half_away(__m256 v) {
  const __m256 truncated = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 fraction = _mm256_sub_ps(v, truncated);  // exact
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 half_or_more = _mm256_cmp_ps(_mm256_andnot_ps(sign, fraction), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 unit = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
  return _mm256_add_ps(truncated, _mm256_and_ps(half_or_more, unit));
}

// Quantizes one block of 32; writes q[32], returns the F16 bits of d (and of s for Q8_1).
template <bool kQ81>
inline void quantize_block(const float* x, int8_t* q, uint16_t* d_bits, uint16_t* s_bits, int32_t* q_sum) {
  const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8), v2 = _mm256_loadu_ps(x + 16),
               v3 = _mm256_loadu_ps(x + 24);
  const float amax = max_abs8(v0, v1, v2, v3);
  const float d = amax / 127.0f;
  const __m256 inverse = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
  __m256i i32[4];
  const __m256 in[4] = {v0, v1, v2, v3};
  for (int j = 0; j < 4; ++j) {
    __m256 scaled = _mm256_mul_ps(in[j], inverse);
    if constexpr (kQ81) {
      scaled = _mm256_round_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      scaled = _mm256_min_ps(_mm256_max_ps(scaled, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    } else {
      scaled = round_half_away(scaled);
    }
    i32[j] = _mm256_cvttps_epi32(scaled);
  }
  // Pack 32 int32 to int8 (values fit), then undo packs' lane interleave.
  const __m256i p01 = _mm256_packs_epi32(i32[0], i32[1]);
  const __m256i p23 = _mm256_packs_epi32(i32[2], i32[3]);
  const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23),
                                                    _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), bytes);
  __m256i sum = _mm256_add_epi32(_mm256_add_epi32(i32[0], i32[1]), _mm256_add_epi32(i32[2], i32[3]));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
  *q_sum = _mm_cvtsi128_si32(s4);
  *d_bits = uint16_t(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
  if constexpr (kQ81) *s_bits = uint16_t(_cvtss_sh(d * float(*q_sum), _MM_FROUND_TO_NEAREST_INT));
}

// For the layouts in steps of 2 blocks (kernels_q8_0_avx2.cpp, kernels_q4_0_avx2.cpp): zeroes the
// row's steps of step_bytes, quantizes each block of 32 as quantize_block does and hands it to
// store(step, half, q, d, q_sum), half = the block's place in its step (0, 1).
template <class Store>
void quantize_block_pairs(const float* x, uint8_t* out, int64_t k, int64_t step_bytes, Store store) {
  std::memset(out, 0, size_t((k + 63) / 64 * step_bytes));
  for (int64_t b = 0; b < k / 32; ++b) {
    alignas(32) int8_t q[32];
    uint16_t d_bits = 0, s_bits = 0;
    int32_t q_sum = 0;
    quantize_block<false>(x + b * 32, q, &d_bits, &s_bits, &q_sum);
    store(out + (b / 2) * step_bytes, int(b % 2), q, _cvtsh_ss(d_bits), q_sum);
  }
}

// Writes the 4 bytes at `value` to the 4 lanes of block `half` in the 8-lane vector at p (lanes
// 2 half, 2 half + 1, 4 + 2 half, 5 + 2 half: the interleaved tiles' order).
inline void store_half_lanes(uint8_t* p, int half, const void* value) {
  const int lanes[4] = {2 * half, 2 * half + 1, 4 + 2 * half, 5 + 2 * half};
  for (int lane : lanes) std::memcpy(p + 4 * lane, value, 4);
}

// Converts a row of k floats (k a multiple of 32) to the layout above; C is the weight offset.
template <int NB, bool kQ81, int C>
void convert_q8_groups(const float* x, uint8_t* out, int64_t k) {
  using L = Q8Layout<NB, kQ81>;
  const int64_t blocks = k / 32;
  const int64_t groups = (k + L::kGroupElements - 1) / L::kGroupElements;
  std::memset(out, 0, size_t(groups * L::kGroupBytes));
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* group = out + (b / NB) * L::kGroupBytes;
    const int j = int(b % NB);
    alignas(32) int8_t q[32];
    uint16_t d_bits = 0, s_bits = 0;
    int32_t q_sum = 0;
    quantize_block<kQ81>(x + b * 32, q, &d_bits, &s_bits, &q_sum);
    std::memcpy(group + L::kQsA + 16 * j, q, 16);
    std::memcpy(group + L::kQsB + 16 * j, q + 16, 16);
    for (int l = 0; l < 4; ++l) {
      int32_t lane_sum = 0;
      for (int i = 0; i < 4; ++i) lane_sum += q[4 * l + i] + q[16 + 4 * l + i];
      const int32_t corr = -C * lane_sum;
      std::memcpy(group + L::kCorr + 16 * j + 4 * l, &corr, 4);
    }
    const float da = _cvtsh_ss(d_bits);
    for (int l = 0; l < 4; ++l) std::memcpy(group + L::kScale + 16 * j + 4 * l, &da, 4);
    if constexpr (kQ81) {
      const float s = _cvtsh_ss(s_bits);
      std::memcpy(group + L::kSum + 16 * j, &s, 4);
    }
  }
}

}  // namespace
}  // namespace kestrel::cpu
