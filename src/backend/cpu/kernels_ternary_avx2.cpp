// AVX2 kernels for llama.cpp's ternary formats TQ1_0 and TQ2_0 (layouts in quant/blocks.h)
// against Q8_K activations (the layout of kernels_q8k_common.h: qs in element order, int16 sums
// of 16, F32 d).
//
// A step is one super-block of 256 values, decoded into 8 vectors of unsigned digits c (value
// c - 1): vector j holds values 32j .. 32j + 31, the same elements as bytes 32j .. 32j + 31 of the
// activations' qs, so maddubs(c, q) needs no shuffles. Its int16 pair sums are at most 2 x 3 x
// 127 = 762, so the 8 vectors' products add up in int16 (<= 6096) before one madd; subtracting
// madd(bsums) removes the "+ 1" of every digit. Each of the 8 int32 lanes is then an exact
// integer, converted exactly and accumulated as acc = fma(float(lanes), d_w * d_a, acc) on every
// path (mac and mac_direct), so one token and any batch agree bit for bit; the lanes are summed
// in finish.
//
// TQ2_0 digits: byte 32h + m holds values 128h + 32l + m at bits 2l: one load, four shift-and-masks.
// TQ1_0 digits: trit n of a byte b is (uint8(b * 3^n) * 3) >> 8. In 16-bit lanes, with p = 3^n,
//   mullo(v, 256 p) = uint8(b_low * p) << 8     (the high byte is shifted out)
//   mullo(v & 0xff00, p) = uint8(b_high * p) << 8
// and mulhi_epu16(x << 8, 3) = (x * 3) >> 8 for each: 7 operations per 32 digits. Bytes 0-31 give
// values 32n + m (n = 0..4); bytes 32-47, broadcast to both 128-bit lanes with trit n in the low
// lane and n + 1 in the high lane, give values 160 + 16n .. 191 + 16n (n = 0, 2), and with trit 4
// beside qh (each qh byte in the 4 bytes 4t + j of the high lane, t = trit) values 224 .. 255.
// Prefill decodes each row tile once per chunk of steps into an L1 buffer (kernels_tile.h).
#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_q8k_common.h"
#include "backend/cpu/kernels_simd_avx2.h"
#include "backend/cpu/kernels_tile.h"

namespace kestrel::cpu {
namespace {

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

struct Q8KAct {
  const uint8_t* block;
  __m256i q(int j) const { return load256(block + Q8KLayout::kQs + 32 * j); }
  // 8 int32 lanes summing to the block's sum of q.
  __m256i q_sums() const { return _mm256_madd_epi16(load256(block + Q8KLayout::kBsums), _mm256_set1_epi16(1)); }
  float d() const { return load_f32(block + Q8KLayout::kScale); }
};

// The trits n of the bytes of v, where `power` holds 3^n in each 16-bit lane and `power256` 256 * 3^n.
inline __m256i trits(__m256i v, __m256i power, __m256i power256) {
  const __m256i three = _mm256_set1_epi16(3);
  const __m256i low = _mm256_mulhi_epu16(_mm256_mullo_epi16(v, power256), three);
  const __m256i high = _mm256_mulhi_epu16(_mm256_mullo_epi16(_mm256_and_si256(v, _mm256_set1_epi16(int16_t(0xff00))), power), three);
  return _mm256_or_si256(low, _mm256_slli_epi16(high, 8));
}

inline __m256i powers(int low_lane, int high_lane) {
  return _mm256_setr_epi16(int16_t(low_lane), int16_t(low_lane), int16_t(low_lane), int16_t(low_lane),
                           int16_t(low_lane), int16_t(low_lane), int16_t(low_lane), int16_t(low_lane),
                           int16_t(high_lane), int16_t(high_lane), int16_t(high_lane), int16_t(high_lane),
                           int16_t(high_lane), int16_t(high_lane), int16_t(high_lane), int16_t(high_lane));
}

struct Tq1Decoder {
  static constexpr int64_t kBlockBytes = 54, kScaleOffset = 52;
  // Digit vector j (values 32j .. 32j + 31) of the block at p.
  static __m256i digits(const uint8_t* p, int j) {
    constexpr int kPow3[6] = {1, 3, 9, 27, 81, 243};
    if (j < 5) return trits(load256(p), powers(kPow3[j], kPow3[j]), powers(256 * kPow3[j], 256 * kPow3[j]));
    const __m128i middle = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32));
    if (j < 7) {
      const int n = 2 * (j - 5);
      return trits(_mm256_broadcastsi128_si256(middle), powers(kPow3[n], kPow3[n + 1]),
                   powers(256 * kPow3[n], 256 * kPow3[n + 1]));
    }
    int32_t qh;
    std::memcpy(&qh, p + 48, 4);
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(middle), _mm_set1_epi32(qh), 1);
    const __m256i power = _mm256_setr_epi16(81, 81, 81, 81, 81, 81, 81, 81, 1, 1, 3, 3, 9, 9, 27, 27);
    return trits(v, power, _mm256_slli_epi16(power, 8));
  }
};

struct Tq2Decoder {
  static constexpr int64_t kBlockBytes = 66, kScaleOffset = 64;
  static __m256i digits(const uint8_t* p, int j) {
    const __m256i v = load256(p + 32 * (j / 4));
    return _mm256_and_si256(_mm256_srli_epi16(v, 2 * (j % 4)), _mm256_set1_epi8(3));
  }
};

template <class D>
struct TernaryKernel {
  static constexpr int64_t kStepBytes = D::kBlockBytes;
  static constexpr int kRows = 4, kTokens = 2, kDecodeRows = 2, kSmallBatchRows = 1;
  static constexpr int64_t kPackSteps = 8;  // 4 rows x 8 steps x 288 bytes of W: 9 KB of L1
  using Acc = __m256;
  using A = Q8KAct;
  struct W {
    __m256i digits[8];
    float d;
  };
  static int64_t steps(int64_t k) { return k / 256; }
  static int64_t direct_steps(int64_t k) { return k / 256; }
  static Acc zero() { return _mm256_setzero_ps(); }
  static float block_d(const uint8_t* p) { return fp16_to_f32(load_u16(p + D::kScaleOffset)); }

  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * D::kBlockBytes;
    W w;
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) w.digits[j] = D::digits(p, j);
    w.d = block_d(p);
    return w;
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t) { return load_w(row, s); }
  static A load_a(const uint8_t* act, int64_t s) { return {act + s * Q8KLayout::kBlockBytes}; }

  // lanes = sum over the block of (c - 1) q, exact; acc += float(lanes) * (d_w * d_a).
  static void finish_block(Acc& acc, __m256i products, float d, const A& a) {
    const __m256i lanes = _mm256_sub_epi32(_mm256_madd_epi16(products, _mm256_set1_epi16(1)), a.q_sums());
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(d * a.d()), acc);
  }
  static void mac(Acc& acc, const W& w, const A& a) {
    __m256i products = _mm256_maddubs_epi16(w.digits[0], a.q(0));
#pragma GCC unroll 8
    for (int j = 1; j < 8; ++j) products = _mm256_add_epi16(products, _mm256_maddubs_epi16(w.digits[j], a.q(j)));
    finish_block(acc, products, w.d, a);
  }
  // mac(acc, load_w(row, s), a), decoding one vector at a time (one token: no W stored).
  static void mac_direct(Acc& acc, const uint8_t* row, int64_t s, const A& a) {
    const uint8_t* p = row + s * D::kBlockBytes;
    __m256i products = _mm256_maddubs_epi16(D::digits(p, 0), a.q(0));
#pragma GCC unroll 8
    for (int j = 1; j < 8; ++j) products = _mm256_add_epi16(products, _mm256_maddubs_epi16(D::digits(p, j), a.q(j)));
    finish_block(acc, products, block_d(p), a);
  }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

constexpr FormatKernels kTq1{DType::TQ1_0, Q8KLayout::row_bytes, convert_q8_k, matmul_tile<TernaryKernel<Tq1Decoder>>};
constexpr FormatKernels kTq2{DType::TQ2_0, Q8KLayout::row_bytes, convert_q8_k, matmul_tile<TernaryKernel<Tq2Decoder>>};

}  // namespace

const FormatKernels* avx2_ternary_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::TQ1_0: return &kTq1;
    case DType::TQ2_0: return &kTq2;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu
