// AVX-512 kernels for the float weight formats F32, F16, BF16 and FP8_E4M3_PC. Each (row, token) dot keeps one 16-lane F32 accumulator over k (fused
// multiply-add, lanes summed at the end by hsum), as the llamafile tinyBLAS kernels do; a tile of
// rows x tokens shares the decoded weight vectors between tokens.
//
// Activation rows are F32, zero-padded to whole steps, holding the reference activation values:
// rounded to F16 for F16 weights and to BF16 for BF16 weights (products of two such values are
// exact in F32, so only the order of additions differs from the scalar reference). For BF16 each
// 32-element step stores its 16 even elements then its 16 odd ones, matching how a 64-byte load of
// BF16 weights splits into even and odd halves of 32-bit lanes with one shift and one AND.
// GCC 12 reports its own _mm512_undefined_* helpers as uninitialised once inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_simd_avx512.h"
#include "backend/cpu/kernels_tile.h"
#include "quant/blocks.h"

namespace kestrel::cpu {
namespace {

// ---- activation converters ------------------------------------------------------------------

int64_t f32_step16_row_bytes(int64_t k) { return (k + 15) / 16 * 64; }
int64_t f32_step32_row_bytes(int64_t k) { return (k + 31) / 32 * 128; }

void convert_f32(const float* x, uint8_t* out, int64_t k) {
  float* dst = reinterpret_cast<float*>(out);
  const int64_t padded = (k + 15) / 16 * 16;
  for (int64_t i = 0; i < padded; i += 16) {
    const __mmask16 m = first_lanes16(k - i < 16 ? k - i : 16);
    _mm512_storeu_ps(dst + i, _mm512_maskz_loadu_ps(m, x + i));
  }
}

void convert_f16_values(const float* x, uint8_t* out, int64_t k) {
  float* dst = reinterpret_cast<float*>(out);
  const int64_t padded = (k + 15) / 16 * 16;
  for (int64_t i = 0; i < padded; i += 16) {
    const __mmask16 m = first_lanes16(k - i < 16 ? k - i : 16);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
}

// Rounds to BF16 (nearest even; NaNs stay NaN, quietened) like core/half.h, kept as F32 bits.
inline __m512 round_bf16(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __m512i quiet_nan = _mm512_or_si512(bits, _mm512_set1_epi32(0x00400000));
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  const __m512i result = _mm512_mask_mov_epi32(rounded, nan, quiet_nan);
  return _mm512_castsi512_ps(_mm512_and_si512(result, _mm512_set1_epi32(int(0xffff0000u))));
}

void convert_bf16_values(const float* x, uint8_t* out, int64_t k) {
  float* dst = reinterpret_cast<float*>(out);
  alignas(64) static constexpr int32_t kEven[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
  alignas(64) static constexpr int32_t kOdd[16] = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
  const __m512i even = _mm512_load_si512(kEven);
  const __m512i odd = _mm512_load_si512(kOdd);
  const int64_t padded = (k + 31) / 32 * 32;
  for (int64_t i = 0; i < padded; i += 32) {
    const int64_t left = k - i;
    const __m512 lo = round_bf16(_mm512_maskz_loadu_ps(first_lanes16(left < 16 ? (left < 0 ? 0 : left) : 16), x + i));
    const int64_t left_hi = left - 16;
    const __m512 hi = round_bf16(
        _mm512_maskz_loadu_ps(first_lanes16(left_hi < 16 ? (left_hi < 0 ? 0 : left_hi) : 16), x + i + 16));
    _mm512_storeu_ps(dst + i, _mm512_permutex2var_ps(lo, even, hi));
    _mm512_storeu_ps(dst + i + 16, _mm512_permutex2var_ps(lo, odd, hi));
  }
}

// ---- micro-kernels ----------------------------------------------------------------------------

struct F32Kernel {
  static constexpr int kRows = 4, kTokens = 6, kDecodeRows = 4;
  static constexpr int64_t kStepBytes = 64;  // one-token tiles prefetch the next tile (kernels_tile.h)
  static constexpr int64_t kPackSteps = 32;  // 512 elements: 8 KB of decoded rows per tile
  using Acc = __m512;
  using W = __m512;
  using A = __m512;
  static int64_t steps(int64_t k) { return (k + 15) / 16; }
  static int64_t direct_steps(int64_t k) { return k / 16; }
  static Acc zero() { return _mm512_setzero_ps(); }
  static W load_w(const uint8_t* row, int64_t s) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + s * 16);
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t k) {
    return _mm512_maskz_loadu_ps(first_lanes16(k - s * 16), reinterpret_cast<const float*>(row) + s * 16);
  }
  static A load_a(const uint8_t* act, int64_t s) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(act) + s * 16);
  }
  static void mac(Acc& acc, W w, A a) { acc = _mm512_fmadd_ps(w, a, acc); }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

struct F16Kernel : F32Kernel {
  static constexpr int64_t kStepBytes = 32;
  static W load_w(const uint8_t* row, int64_t s) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + s * 32)));
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t k) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first_lanes16(k - s * 16), row + s * 32));
  }
};

struct Bf16Kernel {
  static constexpr int kRows = 4, kTokens = 4, kDecodeRows = 4;
  static constexpr int64_t kStepBytes = 64;
  static constexpr int64_t kPackSteps = 16;
  using Acc = __m512;
  struct W {
    __m512 even, odd;
  };
  using A = W;
  static int64_t steps(int64_t k) { return (k + 31) / 32; }
  static int64_t direct_steps(int64_t k) { return k / 32; }
  static Acc zero() { return _mm512_setzero_ps(); }
  static W split(__m512i v) {
    return {_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)),
            _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int(0xffff0000u))))};
  }
  static W load_w(const uint8_t* row, int64_t s) { return split(_mm512_loadu_si512(row + s * 64)); }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t k) {
    return split(_mm512_maskz_loadu_epi16(first_lanes32(k - s * 32), row + s * 64));
  }
  static A load_a(const uint8_t* act, int64_t s) {
    const float* p = reinterpret_cast<const float*>(act) + s * 32;
    return {_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16)};
  }
  static void mac(Acc& acc, const W& w, const A& a) {
    acc = _mm512_fmadd_ps(w.even, a.even, acc);
    acc = _mm512_fmadd_ps(w.odd, a.odd, acc);
  }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

// FP8_E4M3_PC: an F32 row scale, then one E4M3 byte per element; F32 activations. An E4M3 byte
// becomes the F16 with the same sign and bits (e, m) shifted into place: for normal and subnormal
// codes alike that F16 is exactly the E4M3 value / 256 (both formats put the same mantissa over
// exponents 8 apart), so the row's sum is scaled by 256 * scale at the end. The NaN codes (0x7f,
// 0xff; quantizers never produce them) decode as +-480 instead.
struct Fp8Kernel : F32Kernel {
  static constexpr int64_t kStepBytes = 16;  // after the row header: prefetches land 8 bytes early
  static __m512 decode(__m128i codes) {
    // Sign-extended, shifted left 7: sign in bits 14-15, e and m in bits 7-13; clear bit 14.
    const __m256i bits = _mm256_slli_epi16(_mm256_cvtepi8_epi16(codes), 7);
    return _mm512_cvtph_ps(_mm256_and_si256(bits, _mm256_set1_epi16(short(0xbf80))));
  }
  static W load_w(const uint8_t* row, int64_t s) {
    return decode(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + quant::kPerChannelHeaderBytes + s * 16)));
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t k) {
    return decode(_mm_maskz_loadu_epi8(first_lanes16(k - s * 16), row + quant::kPerChannelHeaderBytes + s * 16));
  }
  static float finish(Acc acc, const uint8_t* row) { return hsum(acc) * 256.0f * load_f32(row); }
};

constexpr FormatKernels kF32{DType::F32, f32_step16_row_bytes, convert_f32, matmul_tile<F32Kernel>};
constexpr FormatKernels kF16{DType::F16, f32_step16_row_bytes, convert_f16_values, matmul_tile<F16Kernel>};
constexpr FormatKernels kBf16{DType::BF16, f32_step32_row_bytes, convert_bf16_values, matmul_tile<Bf16Kernel>};
constexpr FormatKernels kFp8{DType::FP8_E4M3_PC, f32_step16_row_bytes, convert_f32, matmul_tile<Fp8Kernel>};

}  // namespace

const FormatKernels* avx512_float_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::F32: return &kF32;
    case DType::F16: return &kF16;
    case DType::BF16: return &kBf16;
    case DType::FP8_E4M3_PC: return &kFp8;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu
