// AVX-512 attention kernels (attention_kernels.h): 16 lanes, masked tails for any head size. A
// score's 16 lanes are folded to 8 and then summed as the AVX2 kernels do (hsum_tree), which keeps
// the 8-keys-at-a-time path and the one-key path the same arithmetic. The activations use the
// AVX2 kernels (kernels.cpp): they are a small share of a step.
// GCC 12 reports its own _mm512_undefined_* helpers as uninitialised once inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/attention_kernels.h"
#include "quant/blocks.h"

namespace kestrel::cpu {
namespace {

// The sum of v's 8 lanes as ((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7)), as vec_math.h's
// hsum_tree (which the AVX2 kernels use) and reduce4 give.
inline float hsum_tree(__m256 v) {
  const __m256 pairs = _mm256_hadd_ps(v, v);
  const __m256 quads = _mm256_hadd_ps(pairs, pairs);
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(quads), _mm256_extractf128_ps(quads, 1)));
}

inline __mmask16 lanes(int count) { return __mmask16(count >= 16 ? 0xffffu : (1u << count) - 1u); }

inline __m256 fold(__m512 v) { return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); }

inline __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 quads = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(quads), _mm256_extractf128_ps(quads, 1));
}

// q . k over hd floats: 16-lane FMA steps (the last one masked), folded to 8, hsum_tree.
inline float dot(const float* q, const float* k, int hd) {
  __m512 acc = _mm512_setzero_ps();
  for (int d = 0; d < hd; d += 16) {
    const __mmask16 m = lanes(hd - d);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + d), _mm512_maskz_loadu_ps(m, k + d), acc);
  }
  return hsum_tree(fold(acc));
}

float block_scores(const float* q, const float* k, int64_t stride, int count, int hd, float scale,
                   float* scores) {
  int i = 0;
  // Whole 16-lane steps when the head size allows (no masks); the same arithmetic as the masked
  // loop, whose last step adds zeros.
  const bool whole = hd % 16 == 0;
  for (; i + 8 <= count; i += 8) {
    const float* ki = k + i * stride;
    __m512 acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_setzero_ps();
    if (whole) {
      for (int d = 0; d < hd; d += 16) {
        const __m512 qv = _mm512_loadu_ps(q + d);
        for (int j = 0; j < 8; ++j) acc[j] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(ki + j * stride + d), acc[j]);
      }
    } else {
      for (int d = 0; d < hd; d += 16) {
        const __mmask16 m = lanes(hd - d);
        const __m512 qv = _mm512_maskz_loadu_ps(m, q + d);
        for (int j = 0; j < 8; ++j) acc[j] = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, ki + j * stride + d), acc[j]);
      }
    }
    const __m256 sums = _mm256_set_m128(reduce4(fold(acc[4]), fold(acc[5]), fold(acc[6]), fold(acc[7])),
                                        reduce4(fold(acc[0]), fold(acc[1]), fold(acc[2]), fold(acc[3])));
    _mm256_storeu_ps(scores + i, _mm256_mul_ps(sums, _mm256_set1_ps(scale)));
  }
  for (; i < count; ++i) scores[i] = dot(q, k + i * stride, hd) * scale;
  __m512 max16 = _mm512_set1_ps(-INFINITY);
  int j = 0;
  for (; j + 16 <= count; j += 16) max16 = _mm512_max_ps(max16, _mm512_loadu_ps(scores + j));
  if (j < count) max16 = _mm512_max_ps(max16, _mm512_mask_loadu_ps(max16, lanes(count - j), scores + j));
  return _mm512_reduce_max_ps(max16);
}

// exp8's algorithm on 16 lanes (the same operations per lane).
inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(_mm512_set1_ps(-87.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}

float exp_shifted_sum(float* x, float shift, int count) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512 sum = _mm512_setzero_ps();
  int i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
    _mm512_storeu_ps(x + i, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (i < count) {
    const __mmask16 m = lanes(count - i);
    const __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s)));
    _mm512_mask_storeu_ps(x + i, m, e);
    sum = _mm512_add_ps(sum, e);
  }
  return hsum_tree(fold(sum));
}

void block_accumulate(float* acc, float correction, const float* w, const float* v, int64_t stride, int count,
                      int hd) {
  const __m512 c = _mm512_set1_ps(correction);
  const bool rescale = correction != 1.0f;
  // 128 elements of acc (8 registers) at a time across the keys; unmasked when whole.
  for (int d0 = 0; d0 < hd; d0 += 128) {
    const int steps = std::min(8, (hd - d0 + 15) / 16);
    __m512 a[8];
    __mmask16 m[8];
    bool whole = true;
    for (int j = 0; j < steps; ++j) {
      m[j] = lanes(hd - d0 - 16 * j);
      whole = whole && m[j] == 0xffff;
      a[j] = _mm512_maskz_loadu_ps(m[j], acc + d0 + 16 * j);
      if (rescale) a[j] = _mm512_mul_ps(a[j], c);
    }
    if (whole) {
      for (int i = 0; i < count; ++i) {
        const __m512 wi = _mm512_set1_ps(w[i]);
        const float* vi = v + i * stride + d0;
        for (int j = 0; j < steps; ++j) a[j] = _mm512_fmadd_ps(wi, _mm512_loadu_ps(vi + 16 * j), a[j]);
      }
    } else {
      for (int i = 0; i < count; ++i) {
        const __m512 wi = _mm512_set1_ps(w[i]);
        const float* vi = v + i * stride + d0;
        for (int j = 0; j < steps; ++j) a[j] = _mm512_fmadd_ps(wi, _mm512_maskz_loadu_ps(m[j], vi + 16 * j), a[j]);
      }
    }
    for (int j = 0; j < steps; ++j) _mm512_mask_storeu_ps(acc + d0 + 16 * j, m[j], a[j]);
  }
}

inline float load_scale_f32(const uint8_t* p) {
  float s;
  std::memcpy(&s, p, sizeof s);
  return s;
}
inline float load_scale_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);
}

void decode_f16(const uint8_t* src, int64_t src_stride, int count, int hd, float* dst) {
  for (int r = 0; r < count; ++r, src += src_stride, dst += hd) {
    const auto* h = reinterpret_cast<const uint16_t*>(src);
    for (int d = 0; d < hd; d += 16) {
      const __mmask16 m = lanes(hd - d);
      _mm512_mask_storeu_ps(dst + d, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, h + d)));
    }
  }
}

void decode_bf16(const uint8_t* src, int64_t src_stride, int count, int hd, float* dst) {
  for (int r = 0; r < count; ++r, src += src_stride, dst += hd) {
    const auto* h = reinterpret_cast<const uint16_t*>(src);
    for (int d = 0; d < hd; d += 16) {
      const __mmask16 m = lanes(hd - d);
      const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, h + d));
      _mm512_mask_storeu_ps(dst + d, m, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
    }
  }
}

// See the AVX2 decode_fp8: the E4M3 byte as F16 bits s.0eeee.mmm0000000 is its value / 256.
void decode_fp8(const uint8_t* src, int64_t src_stride, int count, int hd, float* dst) {
  for (int r = 0; r < count; ++r, src += src_stride, dst += hd) {
    const __m512 scale256 = _mm512_set1_ps(load_scale_f32(src) * 256.0f);
    const uint8_t* codes = src + 4;
    for (int d = 0; d < hd; d += 16) {
      const __mmask16 m = lanes(hd - d);
      const __m256i b = _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, codes + d));
      const __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8),
                                        _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7f)), 7));
      _mm512_mask_storeu_ps(dst + d, m, _mm512_mul_ps(_mm512_cvtph_ps(h), scale256));
    }
  }
}

void decode_q8_0(const uint8_t* src, int64_t src_stride, int count, int hd, float* dst) {
  for (int r = 0; r < count; ++r, src += src_stride, dst += hd) {
    for (int b = 0; b < hd / 32; ++b) {
      const uint8_t* block = src + b * int64_t(sizeof(quant::BlockQ8_0));
      const __m512 d = _mm512_set1_ps(load_scale_f16(block));
      for (int j = 0; j < 32; j += 16) {
        const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2 + j)));
        _mm512_storeu_ps(dst + b * 32 + j, _mm512_mul_ps(_mm512_cvtepi32_ps(q), d));
      }
    }
  }
}

void decode_q4_0(const uint8_t* src, int64_t src_stride, int count, int hd, float* dst) {
  const __m128i low = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
  for (int r = 0; r < count; ++r, src += src_stride, dst += hd) {
    for (int b = 0; b < hd / 32; ++b) {
      const uint8_t* block = src + b * int64_t(sizeof(quant::BlockQ4_0));
      const __m512 d = _mm512_set1_ps(load_scale_f16(block));
      const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
      const __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, low), eight);
      const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), low), eight);
      _mm512_storeu_ps(dst + b * 32, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), d));
      _mm512_storeu_ps(dst + b * 32 + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), d));
    }
  }
}

// F32 rows are copied as they are.
void decode_f32(const uint8_t* src, int64_t src_stride, int count, int hd, float* dst) {
  for (int r = 0; r < count; ++r) std::memcpy(dst + int64_t(r) * hd, src + r * src_stride, size_t(hd) * sizeof(float));
}

KvDecodeFn decoder(DType type) {
  switch (type) {
    case DType::F32: return decode_f32;
    case DType::F16: return decode_f16;
    case DType::BF16: return decode_bf16;
    case DType::FP8_E4M3_PC: return decode_fp8;
    case DType::Q8_0: return decode_q8_0;
    case DType::Q4_0: return decode_q4_0;
    default: return nullptr;
  }
}

}  // namespace

const AttentionKernels kAvx512Attention{block_scores, exp_shifted_sum, block_accumulate, decoder};

}  // namespace kestrel::cpu
