// AVX2 attention and activation kernels (attention_kernels.h): 8 lanes, FMA, F16C.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/vec_math.h"
#include "quant/blocks.h"

namespace kestrel::cpu {
namespace {

// {hsum_tree(a0), hsum_tree(a1), hsum_tree(a2), hsum_tree(a3)}.
inline __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 quads = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(quads), _mm256_extractf128_ps(quads, 1));
}

// x . y over n floats in a fixed order: 8 lanes, hsum_tree, then the scalar tail.
inline float dot(const float* x, const float* y, int n) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc);
  float sum = hsum_tree(acc);
  for (; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

// Eight keys at a time share each load of q and one reduction; each score is the same
// arithmetic as dot(q, k_i, hd).
float block_scores(const float* q, const float* k, int64_t stride, int count, int hd, float scale,
                   float* scores) {
  int i = 0;
  if (hd % 8 == 0) {
    for (; i + 8 <= count; i += 8) {
      const float* ki = k + i * stride;
      __m256 acc[8];
      for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
      for (int d = 0; d < hd; d += 8) {
        const __m256 qv = _mm256_loadu_ps(q + d);
        for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(ki + j * stride + d), acc[j]);
      }
      const __m256 sums = _mm256_set_m128(reduce4(acc[4], acc[5], acc[6], acc[7]), reduce4(acc[0], acc[1], acc[2], acc[3]));
      _mm256_storeu_ps(scores + i, _mm256_mul_ps(sums, _mm256_set1_ps(scale)));
    }
  }
  for (; i < count; ++i) scores[i] = dot(q, k + i * stride, hd) * scale;
  __m256 max8 = _mm256_set1_ps(-INFINITY);
  int j = 0;
  for (; j + 8 <= count; j += 8) max8 = _mm256_max_ps(max8, _mm256_loadu_ps(scores + j));
  __m128 max4 = _mm_max_ps(_mm256_castps256_ps128(max8), _mm256_extractf128_ps(max8, 1));
  max4 = _mm_max_ps(max4, _mm_movehl_ps(max4, max4));
  float max = std::max(_mm_cvtss_f32(max4), _mm_cvtss_f32(_mm_movehdup_ps(max4)));
  for (; j < count; ++j) max = std::max(max, scores[j]);
  return max;
}

float exp_sum(float* x, float shift, int count) { return exp_shifted_sum(x, shift, count); }

// 64 elements of acc at a time stay in registers across the keys; the multiply by the
// correction is skipped when it is 1.
void block_accumulate(float* acc, float correction, const float* w, const float* v, int64_t stride, int count,
                      int hd) {
  const __m256 c = _mm256_set1_ps(correction);
  const bool rescale = correction != 1.0f;
  int d = 0;
  for (; d + 64 <= hd; d += 64) {
    __m256 a[8];
    for (int j = 0; j < 8; ++j) {
      a[j] = _mm256_loadu_ps(acc + d + 8 * j);
      if (rescale) a[j] = _mm256_mul_ps(a[j], c);
    }
    for (int i = 0; i < count; ++i) {
      const __m256 wi = _mm256_set1_ps(w[i]);
      const float* vi = v + i * stride + d;
      for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(wi, _mm256_loadu_ps(vi + 8 * j), a[j]);
    }
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(acc + d + 8 * j, a[j]);
  }
  for (; d + 8 <= hd; d += 8) {
    __m256 a = _mm256_loadu_ps(acc + d);
    if (rescale) a = _mm256_mul_ps(a, c);
    for (int i = 0; i < count; ++i) a = _mm256_fmadd_ps(_mm256_set1_ps(w[i]), _mm256_loadu_ps(v + i * stride + d), a);
    _mm256_storeu_ps(acc + d, a);
  }
  for (; d < hd; ++d) {
    float a = rescale ? acc[d] * correction : acc[d];
    for (int i = 0; i < count; ++i) a = std::fma(w[i], v[i * stride + d], a);
    acc[d] = a;
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
    int d = 0;
    for (; d + 8 <= hd; d += 8) {
      _mm256_storeu_ps(dst + d, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + d))));
    }
    for (; d < hd; ++d) dst[d] = _cvtsh_ss(h[d]);
  }
}

void decode_bf16(const uint8_t* src, int64_t src_stride, int count, int hd, float* dst) {
  for (int r = 0; r < count; ++r, src += src_stride, dst += hd) {
    const auto* h = reinterpret_cast<const uint16_t*>(src);
    int d = 0;
    for (; d + 8 <= hd; d += 8) {
      const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + d)));
      _mm256_storeu_ps(dst + d, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
    }
    for (; d < hd; ++d) {
      const uint32_t bits = uint32_t(h[d]) << 16;
      std::memcpy(dst + d, &bits, sizeof bits);
    }
  }
}

// E4M3 byte s.eeee.mmm read as the F16 bits s.0eeee.mmm0000000 is its value / 256 exactly (normal
// and subnormal alike: both formats put the binary point the same way, F16's exponent bias is 8
// more), so value = cvtph(bits) * 256, and scale * value rounds once, as the reference does.
inline __m256 e4m3x8(const uint8_t* codes, __m256 scale256) {
  const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
  const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8),
                                 _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x7f)), 7));
  return _mm256_mul_ps(_mm256_cvtph_ps(h), scale256);
}

void decode_fp8(const uint8_t* src, int64_t src_stride, int count, int hd, float* dst) {
  for (int r = 0; r < count; ++r, src += src_stride, dst += hd) {
    const float scale = load_scale_f32(src);
    const uint8_t* codes = src + 4;
    const __m256 scale256 = _mm256_set1_ps(scale * 256.0f);
    int d = 0;
    for (; d + 8 <= hd; d += 8) _mm256_storeu_ps(dst + d, e4m3x8(codes + d, scale256));
    if (d < hd) {
      uint8_t tail[8] = {};
      std::memcpy(tail, codes + d, size_t(hd - d));
      float out[8];
      _mm256_storeu_ps(out, e4m3x8(tail, scale256));
      std::memcpy(dst + d, out, size_t(hd - d) * sizeof(float));
    }
  }
}

void decode_q8_0(const uint8_t* src, int64_t src_stride, int count, int hd, float* dst) {
  for (int r = 0; r < count; ++r, src += src_stride, dst += hd) {
    for (int b = 0; b < hd / 32; ++b) {
      const uint8_t* block = src + b * int64_t(sizeof(quant::BlockQ8_0));
      const __m256 d = _mm256_set1_ps(load_scale_f16(block));
      const uint8_t* qs = block + 2;
      for (int j = 0; j < 32; j += 8) {
        const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + j)));
        _mm256_storeu_ps(dst + b * 32 + j, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
      }
    }
  }
}

void decode_q4_0(const uint8_t* src, int64_t src_stride, int count, int hd, float* dst) {
  const __m128i low = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
  for (int r = 0; r < count; ++r, src += src_stride, dst += hd) {
    for (int b = 0; b < hd / 32; ++b) {
      const uint8_t* block = src + b * int64_t(sizeof(quant::BlockQ4_0));
      const __m256 d = _mm256_set1_ps(load_scale_f16(block));
      const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
      const __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, low), eight);                      // elements 0-15
      const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), low), eight);  // 16-31
      float* out = dst + b * 32;
      _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d));
      _mm256_storeu_ps(out + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d));
      _mm256_storeu_ps(out + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d));
      _mm256_storeu_ps(out + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d));
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

void silu_mul(const float* gate, const float* up, int64_t count, float* out) {
  gated_activation<GateKind::Silu>(gate, up, count, out);
}
void gelu_mul(const float* gate, const float* up, int64_t count, float* out) {
  gated_activation<GateKind::GeluTanh>(gate, up, count, out);
}

}  // namespace

const AttentionKernels kAvx2Attention{block_scores, exp_sum, block_accumulate, decoder};
const ActivationKernels kAvx2Activations{silu_mul, gelu_mul};

}  // namespace kestrel::cpu
