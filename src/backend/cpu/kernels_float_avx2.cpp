// AVX2 kernels for the float weight formats F32, F16, BF16 and FP8_E4M3_PC: the AVX-512 design
// (kernels_float_avx512.cpp) with 8-lane vectors and the 16 registers AVX2 has. Activation rows
// hold the reference activation values, zero-padded to whole steps: as F32, except for F16
// weights, whose activations are F16 values and stay F16 (half the bytes each tile reads from L2
// at every step; the F32 values were the same numbers, so results are unchanged: one Zen 3 core
// pair, 1B F16 pp512 +9% in alternating runs); for BF16 each 16-element step stores its 8 even
// elements, then its 8 odd ones.
#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_simd_avx2.h"
#include "backend/cpu/kernels_tile.h"
#include "quant/blocks.h"

namespace kestrel::cpu {
namespace {

int64_t f32_step8_row_bytes(int64_t k) { return (k + 15) / 16 * 64; }

void convert_f32(const float* x, uint8_t* out, int64_t k) {
  float* dst = reinterpret_cast<float*>(out);
  const int64_t padded = f32_step8_row_bytes(k) / 4;
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) _mm256_storeu_ps(dst + i, _mm256_loadu_ps(x + i));
  for (; i < padded; ++i) dst[i] = i < k ? x[i] : 0.0f;
}

int64_t f16_step8_row_bytes(int64_t k) { return (k + 15) / 16 * 32; }

void convert_f16_values(const float* x, uint8_t* out, int64_t k) {
  const int64_t padded = f16_step8_row_bytes(k) / 2;
  for (int64_t i = 0; i < padded; i += 8) {
    const __m256 v = i + 8 <= k ? _mm256_loadu_ps(x + i) : _mm256_maskload_ps(x + i, first_lanes8(k - i < 0 ? 0 : k - i));
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i * 2), h);
  }
}

// Rounds to BF16 (nearest even; NaNs stay NaN, quietened) like core/half.h, kept as F32 bits.
inline __m256 round_bf16(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  const __m256i quiet_nan = _mm256_or_si256(bits, _mm256_set1_epi32(0x00400000));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  const __m256i result = _mm256_blendv_epi8(rounded, quiet_nan, nan);
  return _mm256_castsi256_ps(_mm256_and_si256(result, _mm256_set1_epi32(int(0xffff0000u))));
}

void convert_bf16_values(const float* x, uint8_t* out, int64_t k) {
  float* dst = reinterpret_cast<float*>(out);
  const int64_t padded = (k + 15) / 16 * 16;
  // Even lanes first within each 128-bit half, then the halves' pairs of 64-bit groups reordered.
  const __m256i order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  for (int64_t i = 0; i < padded; i += 16) {
    const int64_t left = k - i;
    const __m256 lo = round_bf16(left >= 8 ? _mm256_loadu_ps(x + i)
                                           : _mm256_maskload_ps(x + i, first_lanes8(left)));
    const __m256 hi = round_bf16(left >= 16 ? _mm256_loadu_ps(x + i + 8)
                                            : _mm256_maskload_ps(x + i + 8, first_lanes8(left - 8 < 0 ? 0 : left - 8)));
    const __m256 lo_split = _mm256_permutevar8x32_ps(lo, order);  // e0 e2 e4 e6 o1 o3 o5 o7
    const __m256 hi_split = _mm256_permutevar8x32_ps(hi, order);
    _mm256_storeu_ps(dst + i, _mm256_permute2f128_ps(lo_split, hi_split, 0x20));
    _mm256_storeu_ps(dst + i + 8, _mm256_permute2f128_ps(lo_split, hi_split, 0x31));
  }
}

// The last partial step of a row of 16-bit elements, copied into a zeroed step.
template <int kStepBytes>
struct TailCopy {
  alignas(32) uint8_t bytes[kStepBytes] = {};
  TailCopy(const uint8_t* src, int64_t count_bytes) { std::memcpy(bytes, src, size_t(count_bytes)); }
};

struct F32Kernel {
  // 3 x 4 tiles: 12 accumulators + 3 weight steps + 1 activation = AVX2's 16 registers. One
  // Zen 3 core, F16 8192 x 2048, n = 512: 60 -> 66 GFLOP/s against 2 x 4.
  static constexpr int kRows = 3, kTokens = 4, kDecodeRows = 4;
  static constexpr int64_t kStepBytes = 32;  // one-token tiles prefetch the next tile (kernels_tile.h)
  using Acc = __m256;
  using W = __m256;
  using A = __m256;
  static int64_t steps(int64_t k) { return (k + 7) / 8; }
  static int64_t direct_steps(int64_t k) { return k / 8; }
  static Acc zero() { return _mm256_setzero_ps(); }
  static W load_w(const uint8_t* row, int64_t s) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + s * 8);
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t k) {
    return _mm256_maskload_ps(reinterpret_cast<const float*>(row) + s * 8, first_lanes8(k - s * 8));
  }
  static A load_a(const uint8_t* act, int64_t s) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(act) + s * 8);
  }
  static void mac(Acc& acc, W w, A a) { acc = _mm256_fmadd_ps(w, a, acc); }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

struct F16Kernel : F32Kernel {
  static constexpr int64_t kStepBytes = 16;
  static W load_w(const uint8_t* row, int64_t s) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + s * 16)));
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t k) {
    const TailCopy<16> tail(row + s * 16, (k - s * 8) * 2);
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(tail.bytes)));
  }
  static A load_a(const uint8_t* act, int64_t s) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(act + s * 16)));
  }
};

struct Bf16Kernel {
  static constexpr int kRows = 2, kTokens = 4, kDecodeRows = 4;
  static constexpr int64_t kStepBytes = 32;
  using Acc = __m256;
  struct W {
    __m256 even, odd;
  };
  using A = W;
  static int64_t steps(int64_t k) { return (k + 15) / 16; }
  static int64_t direct_steps(int64_t k) { return k / 16; }
  static Acc zero() { return _mm256_setzero_ps(); }
  static W split(__m256i v) {
    return {_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)),
            _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xffff0000u))))};
  }
  static W load_w(const uint8_t* row, int64_t s) {
    return split(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + s * 32)));
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t k) {
    const TailCopy<32> tail(row + s * 32, (k - s * 16) * 2);
    return split(_mm256_load_si256(reinterpret_cast<const __m256i*>(tail.bytes)));
  }
  static A load_a(const uint8_t* act, int64_t s) {
    const float* p = reinterpret_cast<const float*>(act) + s * 16;
    return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
  }
  static void mac(Acc& acc, const W& w, const A& a) {
    acc = _mm256_fmadd_ps(w.even, a.even, acc);
    acc = _mm256_fmadd_ps(w.odd, a.odd, acc);
  }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

// FP8_E4M3_PC: as in kernels_float_avx512.cpp, each E4M3 byte becomes the F16 holding its value
// / 256, and the row sum is scaled by 256 * the row scale at the end.
struct Fp8Kernel : F32Kernel {
  static constexpr int64_t kStepBytes = 8;
  static __m256 decode(__m128i codes) {
    const __m128i bits = _mm_slli_epi16(_mm_cvtepi8_epi16(codes), 7);
    return _mm256_cvtph_ps(_mm_and_si128(bits, _mm_set1_epi16(short(0xbf80))));
  }
  static W load_w(const uint8_t* row, int64_t s) {
    return decode(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + quant::kPerChannelHeaderBytes + s * 8)));
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t k) {
    const TailCopy<16> tail(row + quant::kPerChannelHeaderBytes + s * 8, k - s * 8);
    return decode(_mm_load_si128(reinterpret_cast<const __m128i*>(tail.bytes)));
  }
  static float finish(Acc acc, const uint8_t* row) { return hsum(acc) * 256.0f * load_f32(row); }
};

constexpr FormatKernels kF32{DType::F32, f32_step8_row_bytes, convert_f32, matmul_tile<F32Kernel>};
constexpr FormatKernels kF16{DType::F16, f16_step8_row_bytes, convert_f16_values, matmul_tile<F16Kernel>};
constexpr FormatKernels kBf16{DType::BF16, f32_step8_row_bytes, convert_bf16_values, matmul_tile<Bf16Kernel>};
constexpr FormatKernels kFp8{DType::FP8_E4M3_PC, f32_step8_row_bytes, convert_f32, matmul_tile<Fp8Kernel>};

}  // namespace

const FormatKernels* avx2_float_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::F32: return &kF32;
    case DType::F16: return &kF16;
    case DType::BF16: return &kBf16;
    case DType::FP8_E4M3_PC: return &kFp8;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu
