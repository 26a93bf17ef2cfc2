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

// Mask selecting the first `count` (0..8) of 8 int32/float lanes, for maskload/maskstore.
inline __m256i first_lanes8(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}


// Q5_0/Q5_1's fifth bits for two blocks whose 32-bit qh are lanes 0 and 4 of `qh` (the others 0):
// 16 in byte j of each 128-bit half where bit j (high_half: bit 16 + j) of that block's qh is set,
// so that OR-ing them into the low (high) nibbles of [block 0 | block 1] gives the 5-bit levels.
inline __m256i q5_fifth_bits(__m256i qh, bool high_half) {
  const __m256i spread = high_half ? _mm256_setr_epi8(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
                                                      2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3)
                                   : _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                      0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m256i bit = _mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128,
                                       1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(qh, spread), bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

}  // namespace
}  // namespace kestrel::cpu
