// AVX2 kernels for the k-quants whose super-blocks are 16 groups of 16 values, Q6_K, Q3_K and Q2_K,
// against Q8_K activations (kernels_kquant_avx2.h; Q4_K/Q5_K are in kernels_kquant_avx2.cpp).
// Q6_K, stored as q + 32, subtracts 32 * scale * bsum per group (Q3_K, stored as q + 4:
// 4 * scale * bsum) through one madd with the activation's bsums; Q2_K (Q3_K's low bits with a
// 4-bit scale and min per group) subtracts dmin * min * bsum as Q4_K does. As in kernels_kquant_avx2.cpp every
// path ends a super-block with exact integer sums and the same float tail, so decode and the
// interleaved prefill tiles give bitwise the same results.
#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_kquant16_avx2.h"
#include "backend/cpu/kernels_kquant_avx2.h"
#include "backend/cpu/kernels_q8k_common.h"
#include "backend/cpu/kernels_simd_avx2.h"
#include "backend/cpu/kernels_interleave_avx2.h"
#include "backend/cpu/kernels_tile.h"
#include "quant/blocks.h"

namespace kestrel::cpu {
namespace {

// The symmetric k-quants, Q6_K and Q3_K: element e of a super-block is q_e - offset (Q6_K: 6-bit q,
// offset 32; Q3_K: 3-bit q, offset 4) times the int8 scale of its 16-element group
// (kernels_kquant16_avx2.h runs them). A Layout gives a format's bytes: its levels, its 16 group
// scales as int8 and its d.
struct Q6KLayout {
  static constexpr int64_t kBlockBytes = 210;
  static constexpr bool kHasMins = false;
  static constexpr int kOffsetShift = 5;  // offset 32
  static __m128i scales_i8(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192)); }
  static float block_d(const uint8_t* p) { return fp16_to_f32(load_u16(p + 208)); }
  // The levels of half h (elements 128h .. 128h + 127) as four 32-element vectors.
  static void levels_half(const uint8_t* p, int h, __m256i out[4]) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), top2 = _mm256_set1_epi8(0x30);
    const __m256i ql0 = load256(p + 64 * h), ql1 = load256(p + 64 * h + 32);
    const __m256i qh = load256(p + 128 + 32 * h);
    // Bits 2q, 2q + 1 of qh[l] are the top bits of element 128h + 32q + l: move them to 4-5.
    out[0] = _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), top2));
    out[1] = _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), top2));
    out[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, top2));
    out[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                             _mm256_and_si256(_mm256_srli_epi16(qh, 2), top2));
  }
};

// Q3_K (quant/blocks.h): hmask[32], qs[64], 12 bytes of 6-bit scale codes, d.
struct Q3KLayout {
  static constexpr int64_t kBlockBytes = 110;
  static constexpr bool kHasMins = false;
  static constexpr int kOffsetShift = 2;  // offset 4
  // Code j: low 4 bits in byte j % 8 (low nibble for j < 8), top 2 in byte 8 + j % 4 at 2 (j / 4);
  // four codes per 32-bit word, minus 32.
  static __m128i scales_i8(const uint8_t* p) {
    uint32_t words[4];
    quant::q3k_scale_code_words(p + 96, words);
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(words));
    return _mm_sub_epi8(codes, _mm_set1_epi8(32));
  }
  static float block_d(const uint8_t* p) { return fp16_to_f32(load_u16(p + 108)); }
  // Element 128h + 32k + l: low 2 bits at bits 2k of qs[32h + l], high bit at bit 4h + k of hmask[l].
  static void levels_half(const uint8_t* p, int h, __m256i out[4]) {
    const __m256i qs = load256(p + 32 + 32 * h), hmask = load256(p);
    const __m256i two = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    for (int k = 0; k < 4; ++k) {
      const __m256i low = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * k), two);
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hmask, 4 * h + k), one);
      out[k] = _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
    }
  }
};

// Q2_K (quant/blocks.h): scales[16] (scale code in the low nibble, min code in the high one),
// qs[64] (Q3_K's low 2 bits), d, dmin. Affine: element e is d scale_g q_e - dmin min_g, so the
// kernel adds M = sum_g min_g bsum_g times -dmin instead of an integer offset.
struct Q2KLayout {
  static constexpr int64_t kBlockBytes = 84;
  static constexpr bool kHasMins = true;
  static constexpr int kOffsetShift = 0;  // unused: no offset
  static __m128i codes(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
  static __m128i scales_i8(const uint8_t* p) { return _mm_and_si128(codes(p), _mm_set1_epi8(0x0f)); }
  static __m128i mins_u8(const uint8_t* p) { return _mm_and_si128(_mm_srli_epi16(codes(p), 4), _mm_set1_epi8(0x0f)); }
  static float block_d(const uint8_t* p) { return fp16_to_f32(load_u16(p + 80)); }
  static float block_neg_dmin(const uint8_t* p) { return -fp16_to_f32(load_u16(p + 82)); }
  static void levels_half(const uint8_t* p, int h, __m256i out[4]) {
    const __m256i qs = load256(p + 16 + 32 * h), two = _mm256_set1_epi8(3);
    for (int k = 0; k < 4; ++k) out[k] = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * k), two);
  }
};

constexpr FormatKernels kQ6K{DType::Q6_K, Q8KLayout::row_bytes, convert_q8_k,
                             interleaved_matmul<SymmetricKInterleave<Q6KLayout>>};
constexpr FormatKernels kQ3K{DType::Q3_K, Q8KLayout::row_bytes, convert_q8_k,
                             interleaved_matmul<SymmetricKInterleave<Q3KLayout>>};
constexpr FormatKernels kQ2K{DType::Q2_K, Q8KLayout::row_bytes, convert_q8_k,
                             interleaved_matmul<SymmetricKInterleave<Q2KLayout>>};

}  // namespace

const FormatKernels* avx2_kquant16_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::Q6_K: return &kQ6K;
    case DType::Q3_K: return &kQ3K;
    case DType::Q2_K: return &kQ2K;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu
