// AVX-512 kernels for the k-quants Q4_K, Q5_K and Q6_K against Q8_K activations
// (kernels_q8k_common.h). One step is one super-block of 256 elements. A weight decoder unpacks
// it into four 64-byte vectors of levels in element order plus, per vector, the int16 sub-block
// scale of each 16-bit pair; then per (row, token):
//   pairs    = maddubs(levels, activations)           u8 x s8 -> int16 pairs (no saturation:
//                                                     2 * 31 * 127 and 2 * 255 * 32 < 2^15)
//   lanes   += dpwssd(pairs, scales)                  int32, exact
//   acc     += (float(lanes) * d) * d_a               one F32 multiply and add per super-block
// Q4_K/Q5_K subtract dmin * sum_j min_j * (bsums of sub-block j) as a second multiply-add (the
// reference rounds the two terms apart too). Q6_K's levels are q - 32 (signed), so it meets
// activations stored as q_a + 128 and starts each lane from -128 * (its scaled weights), computed
// once per row: every lane then holds its exact share of the super-block's dot product, with no
// offset left to cancel between lanes in float.
// GCC 12 reports its own _mm512_undefined_* helpers as uninitialised once inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_q8k_common.h"
#include "backend/cpu/kernels_simd_avx512.h"
#include "backend/cpu/kernels_tile.h"

namespace kestrel::cpu {
namespace {

// Index vector for Q6_K: words w -> base + w / 8.
inline __m512i quarters(short base) {
  return _mm512_setr_epi64(0x0000000000000000 + base * 0x0001000100010001LL,
                           0x0000000000000000 + base * 0x0001000100010001LL,
                           (base + 1) * 0x0001000100010001LL, (base + 1) * 0x0001000100010001LL,
                           (base + 2) * 0x0001000100010001LL, (base + 2) * 0x0001000100010001LL,
                           (base + 3) * 0x0001000100010001LL, (base + 3) * 0x0001000100010001LL);
}

struct KquantActivation {
  __m512i q[4];
  __m256i bsums;
  __m512 d;
};

inline KquantActivation load_q8_k(const uint8_t* act, int64_t s) {
  const uint8_t* b = act + s * Q8KLayout::kBlockBytes;
  KquantActivation a;
  for (int v = 0; v < 4; ++v) a.q[v] = _mm512_loadu_si512(b + Q8KLayout::kQs + 64 * v);
  a.bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + Q8KLayout::kBsums));
  a.d = _mm512_set1_ps(load_f32(b + Q8KLayout::kScale));
  return a;
}

// ---- Q4_K and Q5_K --------------------------------------------------------------------------

// Byte-shuffle indices (vpermb) with zero-masking of the odd bytes: word w of the result is byte
// index[2w] of the source, zero-extended.
struct ByteIndex {
  alignas(64) uint8_t b[64];
};
// Words 0-15: `first`, words 16-31: `second`.
constexpr ByteIndex word_pairs(int first, int second) {
  ByteIndex index{};
  for (int w = 0; w < 32; ++w) index.b[2 * w] = uint8_t(w < 16 ? first : second);
  return index;
}
// Word g (0..15) = byte g / 2: the min of the sub-block that bsum g belongs to.
constexpr ByteIndex mins_per_bsum() {
  ByteIndex index{};
  for (int g = 0; g < 16; ++g) index.b[2 * g] = uint8_t(g / 2);
  return index;
}
constexpr __mmask64 kEvenBytes = 0x5555555555555555ull;

template <bool kFiveBit>
struct Q45KKernel {
  static constexpr int64_t kBlockBytes = kFiveBit ? 176 : 144;
  static constexpr int kRows = 1, kTokens = 8, kDecodeRows = 2;
  // Vector v holds sub-blocks kPair[v][0] (bytes 0-31) and kPair[v][1] (bytes 32-63): the low and
  // high nibbles of 64 bytes of qs, as the paired activation layout stores them.
  static constexpr ByteIndex kScales[4] = {word_pairs(0, 2), word_pairs(1, 3), word_pairs(4, 6), word_pairs(5, 7)};
  static constexpr ByteIndex kMins = mins_per_bsum();
  using Acc = __m512;
  using A = KquantActivation;
  struct W {
    __m512i levels[4];
    __m512i scales[4];  // the sub-block scale of each int16 pair of vector v
    __m256i mins;       // min of the sub-block of each of the 16 bsums
    __m512 d, neg_dmin;
  };
  static int64_t steps(int64_t k) { return k / 256; }
  static int64_t direct_steps(int64_t k) { return k / 256; }
  static Acc zero() { return _mm512_setzero_ps(); }
  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    prefetch_ahead(p, 2 * kBlockBytes);
    W w;
    w.d = _mm512_set1_ps(fp16_to_f32(load_u16(p)));
    w.neg_dmin = _mm512_set1_ps(-fp16_to_f32(load_u16(p + 2)));
    uint64_t scales, mins;
    unpack_scales_mins(p + 4, &scales, &mins);
    const __m512i sc = _mm512_castsi128_si512(_mm_cvtsi64_si128(int64_t(scales)));
    w.mins = _mm512_castsi512_si256(_mm512_maskz_permutexvar_epi8(
        kEvenBytes, _mm512_load_si512(kMins.b), _mm512_castsi128_si512(_mm_cvtsi64_si128(int64_t(mins)))));
    const uint8_t* qs = p + (kFiveBit ? 48 : 16);
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    __m512i high = _mm512_setzero_si512();
    if constexpr (kFiveBit) high = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
    for (int half = 0; half < 2; ++half) {
      const __m512i bytes = _mm512_loadu_si512(qs + 64 * half);
      w.levels[2 * half] = _mm512_and_si512(bytes, low4);
      w.levels[2 * half + 1] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low4);
    }
    for (int v = 0; v < 4; ++v) {
      if constexpr (kFiveBit) {
        // Bit j of qh[l] is the fifth bit of element 32j + l (sub-block j).
        constexpr int kSub[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
        const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(char(1 << kSub[v][0])),
                                               _mm256_set1_epi8(char(1 << kSub[v][1])), 1);
        w.levels[v] = _mm512_mask_add_epi8(w.levels[v], _mm512_test_epi8_mask(high, bit), w.levels[v],
                                           _mm512_set1_epi8(16));
      }
      w.scales[v] = _mm512_maskz_permutexvar_epi8(kEvenBytes, _mm512_load_si512(kScales[v].b), sc);
    }
    return w;
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t) { return load_w(row, s); }
  static A load_a(const uint8_t* act, int64_t s) { return load_q8_k(act, s); }
  static void mac(Acc& acc, const W& w, const A& a) {
    __m512i lanes = _mm512_setzero_si512();
    for (int v = 0; v < 4; ++v) {
      lanes = _mm512_dpwssd_epi32(lanes, _mm512_maddubs_epi16(w.levels[v], a.q[v]), w.scales[v]);
    }
    const __m256 mins = _mm256_cvtepi32_ps(_mm256_madd_epi16(w.mins, a.bsums));
    acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(lanes), w.d), a.d, acc);
    acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_zextps256_ps512(mins), w.neg_dmin), a.d, acc);
  }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

// ---- Q6_K -----------------------------------------------------------------------------------

struct Q6KKernel {
  static constexpr int64_t kBlockBytes = 210;
  static constexpr int kRows = 1, kTokens = 8, kDecodeRows = 2;
  using Acc = __m512;
  using A = KquantActivation;
  struct W {
    __m512i levels[4];  // q - 32; vector 2h + x: elements 128h + 64x .. + 63
    __m512i scales[4];  // the sub-block scale of each int16 pair
    __m512i start;      // -128 * sum of scale * (q - 32) per lane: undoes the activations' + 128
    __m512 d;
  };
  static int64_t steps(int64_t k) { return k / 256; }
  static int64_t direct_steps(int64_t k) { return k / 256; }
  static Acc zero() { return _mm512_setzero_ps(); }
  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    prefetch_ahead(p, 2 * kBlockBytes);
    W w;
    w.d = _mm512_set1_ps(fp16_to_f32(load_u16(p + 208)));
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192));
    const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc));
    const __m512i low4 = _mm512_set1_epi8(0x0f), top2 = _mm512_set1_epi8(0x30);
    // Within each 32-byte half of qh[32h .. 32h + 31], bits 2q and 2q + 1 of byte l are the top
    // two bits of element 128h + 32q + l: shift them to bits 4-5 of the matching level byte.
    const __m512i up = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(4)), _mm256_set1_epi16(2), 1);
    const __m512i down = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i bias = _mm512_set1_epi8(32);
    __m512i positive = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(p + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * h)));
      const __m512i top_low = _mm512_and_si512(_mm512_sllv_epi16(qh, up), top2);
      const __m512i top_high = _mm512_and_si512(_mm512_srlv_epi16(qh, down), top2);
      // (ql & 0x0f) | top: ternary-logic truth table (A & B) | C.
      const __m512i q0 = _mm512_ternarylogic_epi64(ql, low4, top_low, 0xea);
      const __m512i q1 = _mm512_ternarylogic_epi64(_mm512_srli_epi16(ql, 4), low4, top_high, 0xea);
      w.levels[2 * h] = _mm512_sub_epi8(q0, bias);
      w.levels[2 * h + 1] = _mm512_sub_epi8(q1, bias);
      w.scales[2 * h] = _mm512_permutexvar_epi16(quarters(short(8 * h)), sc16);
      w.scales[2 * h + 1] = _mm512_permutexvar_epi16(quarters(short(8 * h + 4)), sc16);
    }
    const __m512i offset = _mm512_set1_epi8(char(0x80));
    for (int v = 0; v < 4; ++v) {
      positive = _mm512_dpwssd_epi32(positive, _mm512_maddubs_epi16(offset, w.levels[v]), w.scales[v]);
    }
    w.start = _mm512_sub_epi32(_mm512_setzero_si512(), positive);
    return w;
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t) { return load_w(row, s); }
  static A load_a(const uint8_t* act, int64_t s) { return load_q8_k(act, s); }
  static void mac(Acc& acc, const W& w, const A& a) {
    __m512i lanes = w.start;
    for (int v = 0; v < 4; ++v) {
      lanes = _mm512_dpwssd_epi32(lanes, _mm512_maddubs_epi16(a.q[v], w.levels[v]), w.scales[v]);
    }
    acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(lanes), w.d), a.d, acc);
  }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

constexpr FormatKernels kQ4K{DType::Q4_K, Q8KLayout::row_bytes, convert_q8_k<false, true>,
                             matmul_tile<Q45KKernel<false>>};
constexpr FormatKernels kQ5K{DType::Q5_K, Q8KLayout::row_bytes, convert_q8_k<false, true>,
                             matmul_tile<Q45KKernel<true>>};
constexpr FormatKernels kQ6K{DType::Q6_K, Q8KLayout::row_bytes, convert_q8_k<true>, matmul_tile<Q6KKernel>};

}  // namespace

const FormatKernels* avx512_kquant_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::Q4_K: return &kQ4K;
    case DType::Q5_K: return &kQ5K;
    case DType::Q6_K: return &kQ6K;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu
