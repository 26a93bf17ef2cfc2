// Activation converter shared by the AVX2 and AVX-512 kernels of the formats with Q8_K activations
// (kernels_kquant_*.cpp, kernels_iq*_avx2.cpp, kernels_ternary_avx2.cpp; kernels_w8a8_avx2.cpp for
// round_to_int8x32; AVX2 code with internal linkage, see kernels_tile.h).
//
// The values are bit for bit those of quant's quantize_row_q8_K (per 256: d = amax / 127 in F32,
// q = x * (127 / amax) rounded to nearest even and clamped to +-127, bsums = sums of 16 q's),
// laid out per super-block in 320 bytes so every vector load is aligned:
//   qs[256]      the 256 q in element order
//   bsums[16]    int16 sums of 16 q
//   d            F32
// (The AVX-512 kernels reorder this block into their lane-major layout.)
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace kestrel::cpu {
namespace {

// x[0..32) * inverse rounded to nearest (ties to even) and clamped to [-127, 127], as 32 int8 in
// order: the per-token int8 activation quantizers' inner step.
inline __m256i round_to_int8x32(const float* x, __m256 inverse) {
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  __m256i v[4];
  for (int j = 0; j < 4; ++j) {
    __m256 s = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * j), inverse);
    s = _mm256_round_ps(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v[j] = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(s, lo), hi));
  }
  return _mm256_permutevar8x32_epi32(
      _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3])),
      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

struct Q8KLayout {
  static constexpr int64_t kQs = 0, kBsums = 256, kScale = 288, kBlockBytes = 320;
  static int64_t row_bytes(int64_t k) { return k / 256 * kBlockBytes; }
};

// The largest |x_i| of n floats (n a multiple of 8). max(|x|, acc) keeps acc when x is NaN, as
// std::max(amax, |x|) in the references does.
inline float abs_max(const float* x, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), m);
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

inline void convert_q8_k(const float* x, uint8_t* out, int64_t k) {
  for (int64_t b = 0; b < k / 256; ++b) {
    const float* xb = x + b * 256;
    uint8_t* block = out + b * Q8KLayout::kBlockBytes;
    const float amax = abs_max(xb, 256);
    const float d = amax / 127.0f;
    const __m256 inverse = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    alignas(32) int8_t q[256];
    for (int i = 0; i < 256; i += 32) {
      const __m256i bytes = round_to_int8x32(xb + i, inverse);
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + i), bytes);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(block + Q8KLayout::kQs + i), bytes);
    }
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += q[16 * g + i];
      const int16_t s16 = int16_t(sum);
      std::memcpy(block + Q8KLayout::kBsums + 2 * g, &s16, 2);
    }
    std::memcpy(block + Q8KLayout::kScale, &d, 4);
    std::memset(block + Q8KLayout::kScale + 4, 0, size_t(Q8KLayout::kBlockBytes - Q8KLayout::kScale - 4));
  }
}

// The 6-bit scales and mins of the 8 sub-blocks of a Q4_K/Q5_K block (12 bytes at p), one byte
// each (quant/blocks.h, kquant_scale_min, four at a time).
inline void unpack_scales_mins(const uint8_t* p, uint64_t* scales, uint64_t* mins) {
  uint32_t a0, a1, a2;
  std::memcpy(&a0, p, 4);
  std::memcpy(&a1, p + 4, 4);
  std::memcpy(&a2, p + 8, 4);
  *scales = uint64_t(a0 & 0x3f3f3f3fu) | uint64_t((a2 & 0x0f0f0f0fu) | ((a0 >> 2) & 0x30303030u)) << 32;
  *mins = uint64_t(a1 & 0x3f3f3f3fu) | uint64_t(((a2 >> 4) & 0x0f0f0f0fu) | ((a1 >> 2) & 0x30303030u)) << 32;
}

// The 6-bit scale codes ls (0..63; the scale is ls - 32) of the 8 sub-blocks of an IQ4_XS block
// at p, one byte each (quant/blocks.h: low 4 bits in nibble j of scales_l, top 2 at bits 2j of
// scales_h).
inline uint64_t unpack_iq4xs_codes(const uint8_t* p) {
  uint32_t low;
  uint16_t high;
  std::memcpy(&high, p + 2, 2);
  std::memcpy(&low, p + 4, 4);
  uint64_t codes = 0;
  for (int j = 0; j < 8; ++j) codes |= uint64_t(((low >> (4 * j)) & 15) | ((high >> (2 * j)) & 3u) << 4) << (8 * j);
  return codes;
}

}  // namespace
}  // namespace kestrel::cpu
