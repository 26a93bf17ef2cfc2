// AVX-512 kernels for the k-quants Q2_K, Q3_K, Q4_K, Q5_K and Q6_K (those of llama.cpp's Q2_K,
// Q3_K_M, Q4_K_M and Q5_K_M files) and the ternary TQ1_0 and TQ2_0 (Q2_K's bit layout) against Q8_K activations in the lane-major layout (kernels_lanes_avx512.h). A weight
// decoder gathers its levels into the lanes' order (one vpermt2d per vector) and cuts the bits
// out with one GF2P8AFFINEQB per vector (a bit matrix per qword: the low or the high nibble of
// each byte, Q2_K/Q3_K's 2-bit field, or Q3_K/Q5_K/Q6_K's top bits moved into place).

#include "backend/cpu/kernels_lanes_avx512.h"  // first: its target pragma covers this file

#include <cstring>

#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_tile.h"
#include "quant/blocks.h"

namespace kestrel::cpu {
namespace {

using namespace lanes_avx512;

// GF2P8AFFINEQB matrices: result bit i is the parity of (matrix byte 7 - i) & source byte.
constexpr uint64_t kLowNibble = 0x0102040800000000ull, kHighNibble = 0x1020408000000000ull;
constexpr uint64_t top_two_bits(int shift) {  // bits shift, shift + 1 -> bits 4, 5
  return uint64_t(1u << shift) << 24 | uint64_t(1u << (shift + 1)) << 16;
}

// Q4_K qs: byte 32c + l holds element 64c + l (low nibble) and 64c + 32 + l (high nibble), so
// group p (c = p / 4) is dwords 8c + 4 (p % 2) .. + 3 of qs, low nibble when p / 2 is even.
constexpr DwordIndex q4k_gather(int v) {
  DwordIndex index{};
  for (int p = 0; p < 16; ++p) index.i[p] = 8 * (p / 4) + 4 * (p % 2) + v;
  return index;
}
constexpr QwordMatrix q4k_nibbles() {
  QwordMatrix matrix{};
  for (int q = 0; q < 8; ++q) matrix.m[q] = q % 2 == 0 ? kLowNibble : kHighNibble;
  return matrix;
}
// A bit mask over 32 bytes whose bit q of byte l belongs to element 32q + l (Q5_K's qh: the fifth
// bit; Q3_K's hmask: the high bit, q = 4h + k): group p takes dword 4 (p % 2) + v, and both lanes
// of qword q are groups of element block q.
constexpr DwordIndex bit_mask_gather(int v) {
  DwordIndex index{};
  for (int p = 0; p < 16; ++p) index.i[p] = 4 * (p % 2) + v;
  return index;
}
constexpr QwordMatrix bit_q_to(int out_bit) {  // qword q: bit q -> bit out_bit
  QwordMatrix matrix{};
  for (int q = 0; q < 8; ++q) matrix.m[q] = uint64_t(1u << q) << (8 * (7 - out_bit));
  return matrix;
}
// Q6_K: in half h of the block (elements 128h ..), element 32j + l (j < 4) is ql[64h + l + 32 (j
// % 2)], low nibble for j < 2, plus bits 2j, 2j + 1 of qh[32h + l] as bits 4-5.
constexpr DwordIndex q6k_low_gather(int v) {
  DwordIndex index{};
  for (int p = 0; p < 16; ++p) index.i[p] = 16 * (p / 8) + 8 * ((p / 2) % 2) + 4 * (p % 2) + v;
  return index;
}
// Half h = p / 8 of a 64-byte field in 32-byte halves: dword 8h + 4 (p % 2) + v (Q6_K's qh, Q2_K's
// and Q3_K's qs).
constexpr DwordIndex half_gather(int v) {
  DwordIndex index{};
  for (int p = 0; p < 16; ++p) index.i[p] = 8 * (p / 8) + 4 * (p % 2) + v;
  return index;
}
constexpr QwordMatrix q6k_low_bits() {
  QwordMatrix matrix{};
  for (int q = 0; q < 8; ++q) matrix.m[q] = (q % 4) / 2 == 0 ? kLowNibble : kHighNibble;
  return matrix;
}
constexpr QwordMatrix q6k_high_bits() {
  QwordMatrix matrix{};
  for (int q = 0; q < 8; ++q) matrix.m[q] = top_two_bits(2 * (q % 4));
  return matrix;
}

// Q2_K/Q3_K qs: element 128h + 32k + l is bits 2k, 2k + 1 of qs[32h + l]; group p (h = p / 8,
// k = (p % 8) / 2, l = 16 (p % 2) + 4v ..) is dword 8h + 4 (p % 2) + v (half_gather, as Q6_K's qh),
// and both lanes of qword q have k = q % 4.
constexpr QwordMatrix q2k_crumbs() {  // bits 2k, 2k + 1 -> bits 0, 1
  QwordMatrix matrix{};
  for (int q = 0; q < 8; ++q) matrix.m[q] = uint64_t(1u << (2 * (q % 4))) << 56 | uint64_t(2u << (2 * (q % 4))) << 48;
  return matrix;
}
// Q3_K hmask: the high bit of element 128h + 32k + l is bit 4h + k of hmask[l] (bit_mask_gather,
// bit_q_to(2)).

// What the formats with a scale and a min per group share (Q4_K, Q5_K, Q2_K): levels from 0, acc +=
// float(sum of 4 dpbusd) * scale_p * d_a + min_p * (d_a * sum of group p's activations, the
// lanes' extra). K supplies kBlockBytes and load_w.
template <class K>
struct AffineLanesKernel {
  static constexpr int kRows = 8, kTokens = 2, kDecodeRows = 4, kPackSteps = 8, kSmallBatchRows = 2;
  using Acc = __m512;
  using A = const uint8_t*;
  struct W {
    __m512i q[4];
    __m512 scale;  // d * scale of group p's sub-block
    __m512 min;    // -dmin * min of group p's sub-block
  };
  static int64_t steps(int64_t k) { return k / 256; }
  static int64_t direct_steps(int64_t k) { return k / 256; }
  static Acc zero() { return _mm512_setzero_ps(); }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t) { return K::load_w(row, s); }
  static A load_a(const uint8_t* act, int64_t s) { return act + s * LaneLayout::kBlockBytes; }
  static void mac(Acc& acc, const W& w, A a) {
    __m512i lanes = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.q[0], lane_q(a, 0));
    for (int v = 1; v < 4; ++v) lanes = _mm512_dpbusd_epi32(lanes, w.q[v], lane_q(a, v));
    acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(lanes), w.scale), lane_d(a), acc);
    acc = _mm512_fmadd_ps(w.min, _mm512_load_ps(a + LaneLayout::kExtra), acc);
  }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

template <bool kFiveBit>
struct Q45KKernel : AffineLanesKernel<Q45KKernel<kFiveBit>> {
  using W = typename AffineLanesKernel<Q45KKernel<kFiveBit>>::W;

  static constexpr int64_t kBlockBytes = kFiveBit ? 176 : 144, kStepBytes = kBlockBytes;
  static constexpr DwordIndex kGather[4] = {q4k_gather(0), q4k_gather(1), q4k_gather(2), q4k_gather(3)};
  static constexpr QwordMatrix kNibbles = q4k_nibbles();
  static constexpr DwordIndex kHighGather[4] = {bit_mask_gather(0), bit_mask_gather(1), bit_mask_gather(2),
                                                bit_mask_gather(3)};
  static constexpr QwordMatrix kHighBit = bit_q_to(4);
  static __m512 per_group(uint64_t bytes, float factor) {
    return _mm512_mul_ps(_mm512_cvtepi32_ps(per_group_bytes(bytes)), _mm512_set1_ps(factor));
  }
  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    W w;
    uint64_t scales, mins;
    unpack_scales_mins(p + 4, &scales, &mins);
    w.scale = per_group(scales, fp16_to_f32(load_u16(p)));
    w.min = per_group(mins, -fp16_to_f32(load_u16(p + 2)));
    const uint8_t* qs = p + (kFiveBit ? 48 : 16);
    const __m512i lo = _mm512_loadu_si512(qs), hi = _mm512_loadu_si512(qs + 64);
    for (int v = 0; v < 4; ++v) w.q[v] = gather_bits(lo, kGather[v], hi, kNibbles);
    if constexpr (kFiveBit) {
      const __m512i qh = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
      for (int v = 0; v < 4; ++v) {
        w.q[v] = _mm512_or_si512(w.q[v], _mm512_gf2p8affine_epi64_epi8(
                                             _mm512_permutexvar_epi32(_mm512_load_si512(kHighGather[v].i), qh),
                                             _mm512_load_si512(kHighBit.m), 0));
      }
    }
    return w;
  }
};

struct Q6KKernel : OffsetLanesKernel<Q6KKernel> {
  static constexpr int64_t kBlockBytes = 210, kStepBytes = 210;
  static constexpr DwordIndex kLowGather[4] = {q6k_low_gather(0), q6k_low_gather(1), q6k_low_gather(2),
                                               q6k_low_gather(3)};
  static constexpr DwordIndex kHighGather[4] = {half_gather(0), half_gather(1), half_gather(2),
                                                half_gather(3)};
  static constexpr QwordMatrix kLowBits = q6k_low_bits(), kHighBits = q6k_high_bits();
  // W: q (0..63), not q - 32; scale d * scale of group p.
  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    W w;
    const __m512i scales = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192)));
    w.scale = _mm512_mul_ps(_mm512_cvtepi32_ps(scales), _mm512_set1_ps(fp16_to_f32(load_u16(p + 208))));
    const __m512i ql0 = _mm512_loadu_si512(p), ql1 = _mm512_loadu_si512(p + 64);
    const __m512i qh = _mm512_loadu_si512(p + 128);
    for (int v = 0; v < 4; ++v) {
      const __m512i top = _mm512_gf2p8affine_epi64_epi8(
          _mm512_permutexvar_epi32(_mm512_load_si512(kHighGather[v].i), qh), _mm512_load_si512(kHighBits.m), 0);
      w.q[v] = _mm512_or_si512(gather_bits(ql0, kLowGather[v], ql1, kLowBits), top);
    }
    return w;
  }
};

// Q2_K: 16 groups of 16 with a 4-bit scale and min each (scales[p]: low and high nibble), levels
// 0..3 from qs at 16; d, dmin at 80, 82. Q4_K's arithmetic per group.
struct Q2KKernel : AffineLanesKernel<Q2KKernel> {

  static constexpr int64_t kBlockBytes = 84, kStepBytes = kBlockBytes;
  static constexpr DwordIndex kGather[4] = {half_gather(0), half_gather(1), half_gather(2), half_gather(3)};
  static constexpr QwordMatrix kCrumbs = q2k_crumbs();
  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    W w;
    const __m512i codes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m512i low4 = _mm512_set1_epi32(15);
    w.scale = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(codes, low4)), _mm512_set1_ps(fp16_to_f32(load_u16(p + 80))));
    w.min = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(codes, 4)), _mm512_set1_ps(-fp16_to_f32(load_u16(p + 82))));
    const __m512i qs = _mm512_loadu_si512(p + 16);
    for (int v = 0; v < 4; ++v) w.q[v] = gather_bits(qs, kGather[v], qs, kCrumbs);
    return w;
  }
};

// Q3_K: levels q = low 2 bits (qs at 32) | high bit (hmask at 0) << 2, value q - 4 (the lanes start
// at -4 bsum_p); signed 6-bit scales (12 bytes at 96) against d at 108.
struct Q3KKernel : OffsetLanesKernel<Q3KKernel> {
  static constexpr int64_t kBlockBytes = 110, kStepBytes = 110;
  static constexpr DwordIndex kLowGather[4] = {half_gather(0), half_gather(1), half_gather(2), half_gather(3)};
  static constexpr DwordIndex kHighGather[4] = {bit_mask_gather(0), bit_mask_gather(1), bit_mask_gather(2),
                                                bit_mask_gather(3)};
  static constexpr QwordMatrix kCrumbs = q2k_crumbs(), kHighBit = bit_q_to(2);
  // The 16 scale codes (quant/blocks.h: low 4 bits of code j in byte j % 8, high nibble for j >= 8;
  // top 2 bits in byte 8 + j % 4 at 2 (j / 4)), minus 32, four at a time.
  static __m128i scales_i8(const uint8_t* p) {
    uint32_t words[4];
    quant::q3k_scale_code_words(p + 96, words);
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(words));
    return _mm_sub_epi8(codes, _mm_set1_epi8(32));
  }
  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    W w;
    w.scale = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(scales_i8(p))),
                            _mm512_set1_ps(fp16_to_f32(load_u16(p + 108))));
    const __m512i qs = _mm512_loadu_si512(p + 32);
    const __m512i hmask = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    for (int v = 0; v < 4; ++v) {
      const __m512i high = _mm512_gf2p8affine_epi64_epi8(_mm512_permutexvar_epi32(_mm512_load_si512(kHighGather[v].i), hmask),
                                                         _mm512_load_si512(kHighBit.m), 0);
      w.q[v] = _mm512_or_si512(gather_bits(qs, kLowGather[v], qs, kCrumbs), high);
    }
    return w;
  }
};

// TQ2_0 (llama.cpp's ternary format; quant/blocks.h): qs[64] laid out as Q2_K's (value 128h + 32k +
// l in bits 2k, 2k + 1 of qs[32h + l]), digits c = value + 1 in 0..3, one F16 d at 64 for the whole
// super-block; the lanes start at -1 bsum_p.
struct TQ2Kernel : OffsetLanesKernel<TQ2Kernel> {
  static constexpr int64_t kBlockBytes = 66, kStepBytes = 66;
  static constexpr DwordIndex kGather[4] = {half_gather(0), half_gather(1), half_gather(2), half_gather(3)};
  static constexpr QwordMatrix kCrumbs = q2k_crumbs();
  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    W w;
    w.scale = _mm512_set1_ps(fp16_to_f32(load_u16(p + 64)));
    const __m512i qs = _mm512_loadu_si512(p);
    for (int v = 0; v < 4; ++v) w.q[v] = gather_bits(qs, kGather[v], qs, kCrumbs);
    return w;
  }
};

// TQ1_0 (quant/blocks.h): 5 trits per byte, trit n of byte b = (uint8(b * 3^n) * 3) >> 8, taken
// 32 16-bit lanes at a time as the AVX2 kernel takes them (kernels_ternary_avx2.cpp), each 128-bit
// lane of a vector with its own power: natural vector i (values 64i .. 64i + 63) is
//   i = 0, 1: qs[0, 32) twice, trits 2i and 2i + 1;  i = 2: qs[0, 32) trit 4, then qs[32, 48) trits 0, 1;
//   i = 3: qs[32, 48) trits 2, 3, 4, then qh's 4 bytes (4 times) with trits 0..3 per dword pair.
// The lanes want value 16p + 4v + i in vector v, lane p: natural dword 4p + v, gathered from the
// four natural vectors by two vpermt2d and an insert per vector.
struct TQ1Kernel : OffsetLanesKernel<TQ1Kernel> {
  static constexpr int64_t kBlockBytes = 54, kStepBytes = 54;
  // 16-bit lanes: 128-bit lane l of the vector gets power[l].
  static __m512i powers(int p0, int p1, int p2, int p3) {
    const __m128i a = _mm_set1_epi16(int16_t(p0)), b = _mm_set1_epi16(int16_t(p1));
    const __m128i c = _mm_set1_epi16(int16_t(p2)), d = _mm_set1_epi16(int16_t(p3));
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(b, a)), _mm256_set_m128i(d, c), 1);
  }
  static __m512i trits(__m512i v, __m512i power) {
    const __m512i three = _mm512_set1_epi16(3);
    const __m512i low = _mm512_mulhi_epu16(_mm512_mullo_epi16(v, _mm512_slli_epi16(power, 8)), three);
    const __m512i high =
        _mm512_mulhi_epu16(_mm512_mullo_epi16(_mm512_and_si512(v, _mm512_set1_epi16(int16_t(0xff00))), power), three);
    return _mm512_or_si512(low, _mm512_slli_epi16(high, 8));
  }
  static constexpr DwordIndex kLaneGather[4] = {
      {{0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0}}, {{1, 5, 9, 13, 17, 21, 25, 29, 0, 0, 0, 0, 0, 0, 0, 0}},
      {{2, 6, 10, 14, 18, 22, 26, 30, 0, 0, 0, 0, 0, 0, 0, 0}}, {{3, 7, 11, 15, 19, 23, 27, 31, 0, 0, 0, 0, 0, 0, 0, 0}}};
  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m128i middle = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32));
    int32_t qh;
    std::memcpy(&qh, p + 48, 4);
    const __m512i both = _mm512_broadcast_i64x4(qs);
    const __m512i middle4 = _mm512_broadcast_i32x4(middle);
    __m512i natural[4];
    natural[0] = trits(both, powers(1, 1, 3, 3));
    natural[1] = trits(both, powers(9, 9, 27, 27));
    natural[2] = trits(_mm512_inserti64x4(both, _mm512_castsi512_si256(middle4), 1), powers(81, 81, 1, 3));
    const __m512i tail = _mm512_inserti32x4(middle4, _mm_set1_epi32(qh), 3);
    const __m512i tail_power = _mm512_inserti32x4(powers(9, 27, 81, 0), _mm_setr_epi16(1, 1, 3, 3, 9, 9, 27, 27), 3);
    natural[3] = trits(tail, tail_power);
    W w;
    w.scale = _mm512_set1_ps(fp16_to_f32(load_u16(p + 52)));
    for (int v = 0; v < 4; ++v) {
      const __m512i index = _mm512_load_si512(kLaneGather[v].i);
      const __m512i low = _mm512_permutex2var_epi32(natural[0], index, natural[1]);
      const __m512i high = _mm512_permutex2var_epi32(natural[2], index, natural[3]);
      w.q[v] = _mm512_inserti64x4(low, _mm512_castsi512_si256(high), 1);
    }
    return w;
  }
};

constexpr FormatKernels kQ2K{DType::Q2_K, LaneLayout::row_bytes, convert_q8_k_lanes<0>, matmul_tile<Q2KKernel>};
constexpr FormatKernels kQ3K{DType::Q3_K, LaneLayout::row_bytes, convert_q8_k_lanes<4>, matmul_tile<Q3KKernel>};
constexpr FormatKernels kQ4K{DType::Q4_K, LaneLayout::row_bytes, convert_q8_k_lanes<0>,
                             matmul_tile<Q45KKernel<false>>};
constexpr FormatKernels kQ5K{DType::Q5_K, LaneLayout::row_bytes, convert_q8_k_lanes<0>,
                             matmul_tile<Q45KKernel<true>>};
constexpr FormatKernels kQ6K{DType::Q6_K, LaneLayout::row_bytes, convert_q8_k_lanes<32>, matmul_tile<Q6KKernel>};
constexpr FormatKernels kTQ1{DType::TQ1_0, LaneLayout::row_bytes, convert_q8_k_lanes<1>, matmul_tile<TQ1Kernel>};
constexpr FormatKernels kTQ2{DType::TQ2_0, LaneLayout::row_bytes, convert_q8_k_lanes<1>, matmul_tile<TQ2Kernel>};

}  // namespace

const FormatKernels* avx512_kquant_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::Q4_K: return &kQ4K;
    case DType::Q5_K: return &kQ5K;
    case DType::Q6_K: return &kQ6K;
    case DType::Q3_K: return &kQ3K;
    case DType::Q2_K: return &kQ2K;
    case DType::TQ1_0: return &kTQ1;
    case DType::TQ2_0: return &kTQ2;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu
