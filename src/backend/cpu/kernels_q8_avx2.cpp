// AVX2 kernels for the 2- to 5-bit formats whose activations are Q8_0 or Q8_1 (see
// kernels_q8_avx512.cpp for the design): Q4_1, Q5_1, INT4_SYM_G64/G128, INT4_ASYM_G*, INT4_ZP_G*, INT3_ASYM_G*,
// INT2_ASYM_G* (the 8-bit Q8_0 and INT8_PC have int16 kernels, kernels_q8_0_avx2.cpp, and Q4_0,
// Q5_0, INT4_SYM_G32 interleaved ones, kernels_q4_0_avx2.cpp). One step is 64 elements = two
// activation blocks; lanes of a 32-byte vector hold 16 bytes of each block
// (kernels_q8_common.h, NB = 2). AVX2 has no VNNI, so the byte products go through maddubs (u8 x
// s8 -> pairs summed in int16) and madd (int16 pairs -> int32): levels 0..15 (0..31) are unsigned
// already, two maddubs results fit one int16 sum (2 * 2 * 31 * 127 < 2^15), and C = 8 (Q5_0: 16)
// is taken back out through corr as in the AVX-512 kernels.
#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_q8_common.h"
#include "backend/cpu/kernels_simd_avx2.h"
#include "backend/cpu/kernels_tile.h"
#include "quant/blocks.h"

namespace kestrel::cpu {
namespace {

struct WeightStep {
  __m256i a, b;  // unsigned levels
  __m256 scale, min;
};

inline __m256 scales2(const uint8_t* p, int64_t stride) {
  const uint32_t h = uint32_t(load_u16(p)) | uint32_t(load_u16(p + stride)) << 16;
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(int(h)));
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(f), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}
inline __m256 scales1(const uint8_t* p) { return _mm256_set1_ps(fp16_to_f32(load_u16(p))); }

inline __m256i low_nibbles(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m128i load128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// How an INT4 group's header reads: Sym (F16 d; levels - 8), Asym (F16 d, F16 m), ZeroPoint (INT4_ZP).
enum class Int4Header { Sym, Asym, ZeroPoint };

template <int G, Int4Header kHeader>
struct Int4Decoder {
  static constexpr bool kAsymmetric = kHeader != Int4Header::Sym;
  static constexpr int64_t kQs = kAsymmetric ? 4 : 2;
  static constexpr int64_t kBlockElements = G, kBlockBytes = kQs + G / 2;
  static constexpr int C = kAsymmetric ? 0 : 8;
  static constexpr bool kAsym = kAsymmetric;
  static WeightStep decode(const uint8_t* data, int64_t s) {
    WeightStep w;
    if constexpr (G == 32) {
      const uint8_t* p = data + s * 2 * kBlockBytes;
      nibble_halves(p + kQs, p + kBlockBytes + kQs, &w.a, &w.b);
      if constexpr (kHeader == Int4Header::ZeroPoint) {
        // INT4_ZP's scale word (quant/blocks.h): the scale and min = -scale * z of each block.
        const auto [s0, m0] = quant::zp_scale_and_min(p);
        const auto [s1, m1] = quant::zp_scale_and_min(p + kBlockBytes);
        w.scale = _mm256_setr_ps(s0, s0, s0, s0, s1, s1, s1, s1);
        w.min = _mm256_setr_ps(m0, m0, m0, m0, m1, m1, m1, m1);
        return w;
      }
      w.scale = scales2(p, kBlockBytes);
      w.min = kAsymmetric ? scales2(p + 2, kBlockBytes) : _mm256_setzero_ps();
    } else if constexpr (G == 64) {
      // One block per step: q0:16 gives elements 0-15 (low) and 32-47 (high), q16:32 the rest.
      const uint8_t* p = data + s * kBlockBytes;
      const __m256i shift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
      w.a = low_nibbles(_mm256_srlv_epi32(_mm256_broadcastsi128_si256(load128(p + kQs)), shift));
      w.b = low_nibbles(_mm256_srlv_epi32(_mm256_broadcastsi128_si256(load128(p + kQs + 16)), shift));
      header(p, &w);
    } else {
      static_assert(G == 128);
      // Half a block per step: even steps take the low nibbles (elements 0-63), odd the high.
      const uint8_t* p = data + (s / 2) * kBlockBytes;
      const __m256i x0 = load256(p + kQs), x1 = load256(p + kQs + 32);
      __m256i a = _mm256_permute2x128_si256(x0, x1, 0x20);  // q0:16, q32:48
      __m256i b = _mm256_permute2x128_si256(x0, x1, 0x31);  // q16:32, q48:64
      if (s % 2 != 0) {
        a = _mm256_srli_epi16(a, 4);
        b = _mm256_srli_epi16(b, 4);
      }
      w.a = low_nibbles(a);
      w.b = low_nibbles(b);
      header(p, &w);
    }
    return w;
  }
  // One group's scale (and min) over all lanes.
  static void header(const uint8_t* p, WeightStep* w) {
    if constexpr (kHeader == Int4Header::ZeroPoint) {
      const auto [scale, min] = quant::zp_scale_and_min(p);
      w->scale = _mm256_set1_ps(scale);
      w->min = _mm256_set1_ps(min);
    } else {
      w->scale = scales1(p);
      w->min = kAsymmetric ? scales1(p + 2) : _mm256_setzero_ps();
    }
  }
};

// INT3 / INT2 asymmetric groups of G = 64 or 128 (quant/blocks.h): level bits sit in strided
// planes, so a 64-bit shift per qword and a mask give a lane's 16 values. A step (64 values) wants
// a = (values 0-15 of its activation blocks 0 and 1), b = (values 16-31 of each). Low 2 bits of
// value i: bits 2 (i / (G/4)) of byte i % (G/4); INT3's high bit: bit i / (G/8) of byte
// G/4 + i % (G/8).
template <int G, int Bits>
struct IntLowBitDecoder {
  static constexpr int64_t kQs = 4, kQh = kQs + G / 4;
  static constexpr int64_t kBlockElements = G, kBlockBytes = kQs + G * Bits / 8;
  static constexpr int C = 0;
  static constexpr bool kAsym = true;
  static __m256i bits(__m256i source, __m256i shift, int mask) {
    return _mm256_and_si256(_mm256_srlv_epi64(source, shift), _mm256_set1_epi8(char(mask)));
  }
  static WeightStep decode(const uint8_t* data, int64_t s) {
    WeightStep w;
    const uint8_t* p;
    if constexpr (G == 64) {
      // One block per step: the crumbs of values 0-15, 16-31, 32-47, 48-63 at shifts 0, 2, 4, 6 of
      // the same 16 bytes; the high bits of values 8c .. 8c + 7 at bit c of the 8 plane bytes.
      p = data + s * kBlockBytes;
      const __m256i qs = _mm256_broadcastsi128_si256(load128(p + kQs));
      w.a = bits(qs, _mm256_setr_epi64x(0, 0, 4, 4), 3);
      w.b = bits(qs, _mm256_setr_epi64x(2, 2, 6, 6), 3);
      if constexpr (Bits == 3) {
        int64_t plane;
        std::memcpy(&plane, p + kQh, 8);
        const __m256i qh = _mm256_set1_epi64x(plane);
        w.a = _mm256_or_si256(w.a, _mm256_slli_epi16(bits(qh, _mm256_setr_epi64x(0, 1, 4, 5), 1), 2));
        w.b = _mm256_or_si256(w.b, _mm256_slli_epi16(bits(qh, _mm256_setr_epi64x(2, 3, 6, 7), 1), 2));
      }
    } else {
      static_assert(G == 128);
      // Half h of a block per step: activation block j = 2h + c is crumb j of all 32 bytes, and its
      // high bits are bits 2j (values 0-15) and 2j + 1 (16-31) of the 16 plane bytes.
      p = data + (s / 2) * kBlockBytes;
      const int64_t h4 = 4 * (s % 2);
      const __m256i low_shift = _mm256_setr_epi64x(h4, h4, h4 + 2, h4 + 2);
      w.a = bits(_mm256_broadcastsi128_si256(load128(p + kQs)), low_shift, 3);
      w.b = bits(_mm256_broadcastsi128_si256(load128(p + kQs + 16)), low_shift, 3);
      if constexpr (Bits == 3) {
        const __m256i qh = _mm256_broadcastsi128_si256(load128(p + kQh));
        const __m256i high_a = bits(qh, low_shift, 1);
        const __m256i high_b = bits(qh, _mm256_add_epi64(low_shift, _mm256_set1_epi64x(1)), 1);
        w.a = _mm256_or_si256(w.a, _mm256_slli_epi16(high_a, 2));
        w.b = _mm256_or_si256(w.b, _mm256_slli_epi16(high_b, 2));
      }
    }
    w.scale = scales1(p);
    w.min = scales1(p + 2);
    return w;
  }
};

// Q5_1 (d, m, qh[4], qs[16]; level * d + m): the 5-bit levels of two blocks (five_bit_halves).
struct Q5_1Decoder {
  static constexpr int64_t kQh = 4, kQs = 8;
  static constexpr int64_t kBlockElements = 32, kBlockBytes = kQs + 16;
  static constexpr int C = 0;
  static constexpr bool kAsym = true;
  static WeightStep decode(const uint8_t* data, int64_t s) {
    const uint8_t* p = data + s * 2 * kBlockBytes;
    WeightStep w;
    five_bit_halves(p + kQh, p + kQs, p + kBlockBytes + kQh, p + kBlockBytes + kQs, &w.a, &w.b);
    w.scale = scales2(p, kBlockBytes);
    w.min = scales2(p + 2, kBlockBytes);
    return w;
  }
};

template <class D>
struct PairKernel {
  using Layout = Q8Layout<2, D::kAsym>;
  // 2 x 4 tiles: one Zen 3 core, 8192 x 2048, n = 512, best of 3 against 1 x 4: INT4_ASYM_G128
  // 54 -> 69 GFLOP/s (Q4_0, since moved to kernels_q4_0_avx2.cpp, 66 -> 86; 2 x 3, 2 x 2: slower).
  static constexpr int kRows = 2, kTokens = 4, kDecodeRows = 2;
  // Bytes of one step (for G = 128 a step is half a block; such rows never have a partial step).
  static constexpr int64_t kStepBytes =
      D::kBlockElements > 64 ? D::kBlockBytes : 64 / D::kBlockElements * D::kBlockBytes;
  using Acc = __m256;
  using W = WeightStep;
  struct A {
    __m256i qa, qb, corr;
    __m256 da, s;
  };
  static int64_t steps(int64_t k) { return (k + 63) / 64; }
  static int64_t direct_steps(int64_t k) { return k / 64; }
  static Acc zero() { return _mm256_setzero_ps(); }
  static W load_w(const uint8_t* row, int64_t s) { return D::decode(row, s); }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t k) {
    alignas(32) uint8_t step[kStepBytes + 32] = {};
    std::memcpy(step, row + s * kStepBytes,
                size_t((k - s * 64) / D::kBlockElements * D::kBlockBytes));
    return D::decode(step, 0);
  }
  static A load_a(const uint8_t* act, int64_t s) {
    const uint8_t* g = act + s * Layout::kGroupBytes;
    A a;
    a.qa = load256(g + Layout::kQsA);
    a.qb = load256(g + Layout::kQsB);
    a.corr = load256(g + Layout::kCorr);
    a.da = _mm256_loadu_ps(reinterpret_cast<const float*>(g + Layout::kScale));
    if constexpr (D::kAsym) {
      a.s = _mm256_loadu_ps(reinterpret_cast<const float*>(g + Layout::kSum));
    } else {
      a.s = _mm256_setzero_ps();
    }
    return a;
  }
  static void mac(Acc& acc, const W& w, const A& a) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(w.a, a.qa), _mm256_maddubs_epi16(w.b, a.qb));
    const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(p, ones), a.corr);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(w.scale, a.da), acc);
    if constexpr (D::kAsym) acc = _mm256_fmadd_ps(w.min, a.s, acc);
  }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

template <class D>
constexpr FormatKernels make_kernels(DType type) {
  return {type, Q8Layout<2, D::kAsym>::row_bytes, convert_q8_groups<2, D::kAsym, D::C>,
          matmul_tile<PairKernel<D>>};
}

using H = Int4Header;
constexpr FormatKernels kQ4_1 = make_kernels<Int4Decoder<32, H::Asym>>(DType::Q4_1);  // = INT4_ASYM_G32
constexpr FormatKernels kQ5_1 = make_kernels<Q5_1Decoder>(DType::Q5_1);
constexpr FormatKernels kInt4Sym64 = make_kernels<Int4Decoder<64, H::Sym>>(DType::INT4_SYM_G64);
constexpr FormatKernels kInt4Sym128 = make_kernels<Int4Decoder<128, H::Sym>>(DType::INT4_SYM_G128);
constexpr FormatKernels kInt4Asym32 = make_kernels<Int4Decoder<32, H::Asym>>(DType::INT4_ASYM_G32);
constexpr FormatKernels kInt4Asym64 = make_kernels<Int4Decoder<64, H::Asym>>(DType::INT4_ASYM_G64);
constexpr FormatKernels kInt4Asym128 = make_kernels<Int4Decoder<128, H::Asym>>(DType::INT4_ASYM_G128);
constexpr FormatKernels kInt4Zp32 = make_kernels<Int4Decoder<32, H::ZeroPoint>>(DType::INT4_ZP_G32);
constexpr FormatKernels kInt4Zp64 = make_kernels<Int4Decoder<64, H::ZeroPoint>>(DType::INT4_ZP_G64);
constexpr FormatKernels kInt4Zp128 = make_kernels<Int4Decoder<128, H::ZeroPoint>>(DType::INT4_ZP_G128);
constexpr FormatKernels kInt3Asym64 = make_kernels<IntLowBitDecoder<64, 3>>(DType::INT3_ASYM_G64);
constexpr FormatKernels kInt3Asym128 = make_kernels<IntLowBitDecoder<128, 3>>(DType::INT3_ASYM_G128);
constexpr FormatKernels kInt2Asym64 = make_kernels<IntLowBitDecoder<64, 2>>(DType::INT2_ASYM_G64);
constexpr FormatKernels kInt2Asym128 = make_kernels<IntLowBitDecoder<128, 2>>(DType::INT2_ASYM_G128);

}  // namespace

const FormatKernels* avx2_q8_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::Q4_1: return &kQ4_1;
    case DType::Q5_1: return &kQ5_1;
    case DType::INT4_SYM_G64: return &kInt4Sym64;
    case DType::INT4_SYM_G128: return &kInt4Sym128;
    case DType::INT4_ASYM_G32: return &kInt4Asym32;
    case DType::INT4_ASYM_G64: return &kInt4Asym64;
    case DType::INT4_ASYM_G128: return &kInt4Asym128;
    case DType::INT4_ZP_G32: return &kInt4Zp32;
    case DType::INT4_ZP_G64: return &kInt4Zp64;
    case DType::INT4_ZP_G128: return &kInt4Zp128;
    case DType::INT3_ASYM_G64: return &kInt3Asym64;
    case DType::INT3_ASYM_G128: return &kInt3Asym128;
    case DType::INT2_ASYM_G64: return &kInt2Asym64;
    case DType::INT2_ASYM_G128: return &kInt2Asym128;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu
