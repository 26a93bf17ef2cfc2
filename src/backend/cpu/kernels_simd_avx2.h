// Small AVX2 helpers shared by the kernels_*_avx2.cpp files; internal linkage like kernels_tile.h.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace kestrel::cpu {
namespace {

// Sum of the 8 lanes in a fixed order (halves, pairs), the same for every caller.
inline float hsum(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline float fp16_to_f32(uint16_t h) { return _cvtsh_ss(h); }

// a * b + c rounded once, as one lane of _mm_fmadd_ps (no std:: call in kernel files: kernels_tile.h).
inline float fma1(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

// The sum of v's 8 int32 lanes (exact).
inline int32_t hsum_epi32(__m256i v) {
  __m128i quads = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  quads = _mm_add_epi32(quads, _mm_unpackhi_epi64(quads, quads));
  return _mm_cvtsi128_si32(_mm_add_epi32(quads, _mm_shuffle_epi32(quads, 1)));
}

// Mask selecting the first `count` (0..8) of 8 int32/float lanes, for maskload/maskstore.
inline __m256i first_lanes8(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}


// The levels of two 32-element blocks of nibbles (element j in the low nibble of byte j of qs,
// j + 16 in the high) as halves: *lo = [block 0 | block 1] elements 0-15, *hi = elements 16-31.
inline void nibble_halves(const uint8_t* qs0, const uint8_t* qs1, __m256i* lo, __m256i* hi) {
  const __m256i y = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(qs1), reinterpret_cast<const __m128i*>(qs0));
  const __m256i low = _mm256_set1_epi8(0x0f);
  *lo = _mm256_and_si256(y, low);
  *hi = _mm256_and_si256(_mm256_srli_epi16(y, 4), low);
}

// Q5_0/Q5_1: nibble_halves plus each block's 32-bit qh (at qh0, qh1), bit j giving 16 to element j.
inline void five_bit_halves(const uint8_t* qh0, const uint8_t* qs0, const uint8_t* qh1, const uint8_t* qs1,
                            __m256i* lo, __m256i* hi) {
  nibble_halves(qs0, qs1, lo, hi);
  uint32_t h0, h1;
  std::memcpy(&h0, qh0, 4);
  std::memcpy(&h1, qh1, 4);
  const __m256i qh = _mm256_setr_epi32(int(h0), 0, 0, 0, int(h1), 0, 0, 0);
  // Byte j of each half takes byte j / 8 of its block's qh (of qh >> 16 for hi), then tests bit j % 8.
  const __m256i spread_lo = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                             0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m256i bit = _mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128,
                                       1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  const __m256i sixteen = _mm256_set1_epi8(16);
  auto fifth = [&](__m256i spread) {
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(qh, spread), bit), bit), sixteen);
  };
  *lo = _mm256_or_si256(*lo, fifth(spread_lo));
  *hi = _mm256_or_si256(*hi, fifth(_mm256_add_epi8(spread_lo, _mm256_set1_epi8(2))));
}

}  // namespace
}  // namespace kestrel::cpu
