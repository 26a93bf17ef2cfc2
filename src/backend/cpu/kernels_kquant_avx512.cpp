// AVX-512 kernels for the k-quants Q4_K, Q5_K and Q6_K (those of llama.cpp's Q4_K_M and Q5_K_M
// files), IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ1_S and IQ1_M against Q8_K activations. One step is one super-block of 256 elements.
//
// Activations are stored lane-major: in each super-block, 32-bit lane p of activation vector v
// (v = 0..3) holds elements 16p + 4v .. 16p + 4v + 3, so over the four vectors lane p covers
// exactly group p (elements 16p .. 16p + 15): the group of bsum p, of Q6_K scale p, and half of
// Q4_K/Q5_K sub-block p / 2. A weight decoder gathers its levels into the same order (one
// vpermt2d per vector) and cuts the bits out with one GF2P8AFFINEQB per vector (a bit matrix per
// qword: the low or the high nibble of each byte, or Q5_K/Q6_K's top bits moved into place).
// Then per (row, token):
//   lanes  = dpbusd x 4 (unsigned levels . signed q_a)    int32, exact: group p's integer dot
//   acc   += (float(lanes) * (d * scale_p)) * d_a          d * scale_p is exact in F32
//   Q4_K/Q5_K:  acc += (-dmin * min_p) * (d_a * bsum_p)   the min term, one lane per group
//   Q6_K:       lanes start from -32 * bsum_p             levels are stored q, not q - 32
//   IQ4_XS:     lanes start from -128 * bsum_p            levels are looked up + 128 (unsigned)
//   IQ3_S:      lanes start from -16 * bsum_p             signed grid values + 16 (unsigned)
//   IQ3_XXS:    lanes start from -64 * bsum_p             signed grid values + 64 (unsigned)
//   IQ2_XXS:    lanes start from -64 * bsum_p             signed grid values + 64 (unsigned)
//   IQ1_S/M:    lanes start from -9 * bsum_p              8 grid +- 1 (the delta) + 9 (unsigned)
// 7-8 vector operations per (row, token, super-block), against 14 for the former maddubs/dpwssd
// form (maddubs issues on one port only); the decoding is shared by the 8 x 2 token tile and, on
// the packed prefill path (kernels_tile.h), by a whole block of up to 64 tokens. Every lane's
// integer part is exact, so only the two float roundings per lane differ from the reference's.
// Measured on one Emerald Rapids core, n = 512: Q4_K 141 -> ~245 GFLOP/s, Q6_K 135 -> ~255.
// GCC 12 reports its own _mm512_undefined_* helpers as uninitialised once inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// GF2P8AFFINEQB (see above); has_avx512_set() requires GFNI before this file may run.
#pragma GCC target("gfni")

#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_q8k_common.h"
#include "backend/cpu/kernels_simd_avx512.h"
#include "backend/cpu/kernels_tile.h"
#include "quant/blocks.h"
#include "quant/iq3_grids.h"
#include "quant/iq_grids.h"

namespace kestrel::cpu {
namespace {

// Byte-shuffle indices (vpermb).
struct ByteIndex {
  alignas(64) uint8_t b[64];
};

struct LaneLayout {
  static constexpr int64_t kQs = 0, kExtra = 256, kScale = 320, kBlockBytes = 384;
  static int64_t row_bytes(int64_t k) { return k / 256 * kBlockBytes; }
};

// 384 bytes per super-block: qs[256] (lane-major), extra[16] (kLevelOffset 0, Q4_K/Q5_K: F32 d_a *
// bsum_p; otherwise int32 -kLevelOffset * bsum_p: Q6_K 32, IQ4_XS 128), F32 d_a, padding. The q,
// bsums and d are bit for bit those of quantize_row_q8_K (computed by convert_q8_k, then reordered).
template <int kLevelOffset>
void convert_q8_k_lanes(const float* x, uint8_t* out, int64_t k) {
  alignas(64) uint8_t plain[Q8KLayout::kBlockBytes];
  for (int64_t b = 0; b < k / 256; ++b) {
    convert_q8_k(x + b * 256, plain, 256);
    uint8_t* block = out + b * LaneLayout::kBlockBytes;
    uint32_t dwords[64];
    std::memcpy(dwords, plain + Q8KLayout::kQs, 256);
    for (int v = 0; v < 4; ++v) {
      for (int p = 0; p < 16; ++p) std::memcpy(block + 64 * v + 4 * p, &dwords[4 * p + v], 4);
    }
    const float d = load_f32(plain + Q8KLayout::kScale);
    for (int p = 0; p < 16; ++p) {
      int16_t bsum;
      std::memcpy(&bsum, plain + Q8KLayout::kBsums + 2 * p, 2);
      if constexpr (kLevelOffset != 0) {
        const int32_t start = -kLevelOffset * int32_t(bsum);
        std::memcpy(block + LaneLayout::kExtra + 4 * p, &start, 4);
      } else {
        const float scaled = d * float(bsum);
        std::memcpy(block + LaneLayout::kExtra + 4 * p, &scaled, 4);
      }
    }
    std::memcpy(block + LaneLayout::kScale, &d, 4);
    std::memset(block + LaneLayout::kScale + 4, 0, size_t(LaneLayout::kBlockBytes - LaneLayout::kScale - 4));
  }
}

struct DwordIndex {
  alignas(64) int32_t i[16];
};
struct QwordMatrix {
  alignas(64) uint64_t m[8];
};
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
// Q5_K: the fifth bit of element 32j + l is bit j of qh[l]; group p (j = p / 2) takes dword
// 4 (p % 2) + v of qh, and both lanes of qword q are groups of sub-block q.
constexpr DwordIndex q5k_high_gather(int v) {
  DwordIndex index{};
  for (int p = 0; p < 16; ++p) index.i[p] = 4 * (p % 2) + v;
  return index;
}
constexpr QwordMatrix q5k_high_bit() {  // bit q -> bit 4
  QwordMatrix matrix{};
  for (int q = 0; q < 8; ++q) matrix.m[q] = uint64_t(1u << q) << 24;
  return matrix;
}
// Q6_K: in half h of the block (elements 128h ..), element 32j + l (j < 4) is ql[64h + l + 32 (j
// % 2)], low nibble for j < 2, plus bits 2j, 2j + 1 of qh[32h + l] as bits 4-5.
constexpr DwordIndex q6k_low_gather(int v) {
  DwordIndex index{};
  for (int p = 0; p < 16; ++p) index.i[p] = 16 * (p / 8) + 8 * ((p / 2) % 2) + 4 * (p % 2) + v;
  return index;
}
constexpr DwordIndex q6k_high_gather(int v) {
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

inline __m512i gather_bits(__m512i lo, const DwordIndex& index, __m512i hi, const QwordMatrix& matrix) {
  const __m512i dwords = _mm512_permutex2var_epi32(lo, _mm512_load_si512(index.i), hi);
  return _mm512_gf2p8affine_epi64_epi8(dwords, _mm512_load_si512(matrix.m), 0);
}
inline __m512i lane_q(const uint8_t* act, int v) { return _mm512_load_si512(act + LaneLayout::kQs + 64 * v); }
inline __m512 lane_d(const uint8_t* act) { return _mm512_set1_ps(load_f32(act + LaneLayout::kScale)); }

// Formats whose lanes start from the activations' int32 extra (kLevelOffset != 0): acc +=
// (float(extra_p + sum of 4 dpbusd) * scale_p) * d_a.
inline void mac_from_start(__m512& acc, const __m512i (&q)[4], __m512 scale, const uint8_t* a) {
  __m512i lanes = _mm512_load_si512(a + LaneLayout::kExtra);
  for (int v = 0; v < 4; ++v) lanes = _mm512_dpbusd_epi32(lanes, q[v], lane_q(a, v));
  acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(lanes), scale), lane_d(a), acc);
}

// Byte 4p of the result = byte p / 2 of the source (the sub-block of group p); others zero.
constexpr ByteIndex kSubBlockOfGroup = [] {
  ByteIndex index{};
  for (int p = 0; p < 16; ++p) index.b[4 * p] = uint8_t(p / 2);
  return index;
}();
// One byte per 32-element sub-block (byte j: sub-block j) -> int32 lane p = byte p / 2, unsigned.
inline __m512i per_group_bytes(uint64_t bytes) {
  return _mm512_maskz_permutexvar_epi8(0x1111111111111111ull, _mm512_load_si512(kSubBlockOfGroup.b),
                                       _mm512_castsi128_si512(_mm_cvtsi64_si128(int64_t(bytes))));
}
// `shift` in the odd int32 lanes, 0 in the even ones: odd groups are the second half of their
// sub-block.
inline __m512i odd_lane_shift(int shift) {
  return _mm512_set_epi32(shift, 0, shift, 0, shift, 0, shift, 0, shift, 0, shift, 0, shift, 0, shift, 0);
}

// What the kernels whose lanes start from the activations' int32 extra share (Q6_K, IQ4_XS,
// IQ3_XXS/IQ3_S): the tile shape, the weights as 4 vectors of unsigned levels and a per-group
// scale, and mac_from_start. K supplies kBlockBytes and load_w.
template <class K>
struct OffsetLanesKernel {
  static constexpr int kRows = 8, kTokens = 2, kDecodeRows = 4, kPackSteps = 8, kSmallBatchRows = 2;
  using Acc = __m512;
  using A = const uint8_t*;
  struct W {
    __m512i q[4];  // unsigned levels (the format's value + its offset)
    __m512 scale;  // the scale of group p's sub-block
  };
  static int64_t steps(int64_t k) { return k / 256; }
  static int64_t direct_steps(int64_t k) { return k / 256; }
  static Acc zero() { return _mm512_setzero_ps(); }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t) { return K::load_w(row, s); }
  static A load_a(const uint8_t* act, int64_t s) { return act + s * LaneLayout::kBlockBytes; }
  static void mac(Acc& acc, const W& w, A a) { mac_from_start(acc, w.q, w.scale, a); }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

template <bool kFiveBit>
struct Q45KKernel {
  static constexpr int64_t kBlockBytes = kFiveBit ? 176 : 144, kStepBytes = kBlockBytes;
  static constexpr int kRows = 8, kTokens = 2, kDecodeRows = 4, kPackSteps = 8, kSmallBatchRows = 2;
  static constexpr DwordIndex kGather[4] = {q4k_gather(0), q4k_gather(1), q4k_gather(2), q4k_gather(3)};
  static constexpr QwordMatrix kNibbles = q4k_nibbles();
  static constexpr DwordIndex kHighGather[4] = {q5k_high_gather(0), q5k_high_gather(1), q5k_high_gather(2),
                                                q5k_high_gather(3)};
  static constexpr QwordMatrix kHighBit = q5k_high_bit();
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
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t) { return load_w(row, s); }
  static A load_a(const uint8_t* act, int64_t s) { return act + s * LaneLayout::kBlockBytes; }
  static void mac(Acc& acc, const W& w, A a) {
    __m512i lanes = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.q[0], lane_q(a, 0));
    for (int v = 1; v < 4; ++v) lanes = _mm512_dpbusd_epi32(lanes, w.q[v], lane_q(a, v));
    acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(lanes), w.scale), lane_d(a), acc);
    acc = _mm512_fmadd_ps(w.min, _mm512_load_ps(a + LaneLayout::kExtra), acc);
  }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

struct Q6KKernel : OffsetLanesKernel<Q6KKernel> {
  static constexpr int64_t kBlockBytes = 210, kStepBytes = 210;
  static constexpr DwordIndex kLowGather[4] = {q6k_low_gather(0), q6k_low_gather(1), q6k_low_gather(2),
                                               q6k_low_gather(3)};
  static constexpr DwordIndex kHighGather[4] = {q6k_high_gather(0), q6k_high_gather(1), q6k_high_gather(2),
                                                q6k_high_gather(3)};
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

// IQ4_XS: 136 bytes per super-block (F16 d, scales_h, scales_l[4], qs[128]); sub-block j (32
// elements) has a 6-bit scale ls_j - 32 and its levels in qs[16j .. 16j + 15], low nibbles for
// elements 32j .. + 15 and high nibbles for 32j + 16 .. + 31: group p (16 elements) is sub-block p
// / 2, the low nibbles when p is even. Levels are kIQ4Levels + 128 (1 .. 241, unsigned for
// dpbusd); the activations' extra, -128 * bsum_p, takes the offset back out of each lane.
constexpr DwordIndex iq4xs_gather(int v) {
  DwordIndex index{};
  for (int p = 0; p < 16; ++p) index.i[p] = 4 * (p / 2) + v;
  return index;
}

struct Iq4XsKernel : OffsetLanesKernel<Iq4XsKernel> {
  static constexpr int64_t kBlockBytes = 136, kStepBytes = kBlockBytes;
  static constexpr DwordIndex kGather[4] = {iq4xs_gather(0), iq4xs_gather(1), iq4xs_gather(2), iq4xs_gather(3)};
  // kIQ4Levels + 128 in each 128-bit lane (vpshufb looks up within lanes).
  static constexpr ByteIndex kLevels = [] {
    ByteIndex table{};
    for (int i = 0; i < 64; ++i) table.b[i] = uint8_t(int(quant::kIQ4Levels[i % 16]) + 128);
    return table;
  }();
  // W: levels + 128; scale d * (ls - 32) of group p's sub-block.
  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    W w;
    const __m512i codes = per_group_bytes(unpack_iq4xs_codes(p));
    w.scale = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(codes, _mm512_set1_epi32(32))),
                            _mm512_set1_ps(fp16_to_f32(load_u16(p))));
    const __m512i lo = _mm512_loadu_si512(p + 8), hi = _mm512_loadu_si512(p + 72);
    // Odd groups take the high nibbles: shift their lanes by 4 before masking.
    const __m512i shift = odd_lane_shift(4);
    const __m512i table = _mm512_load_si512(kLevels.b);
    for (int v = 0; v < 4; ++v) {
      const __m512i dwords = _mm512_permutex2var_epi32(lo, _mm512_load_si512(kGather[v].i), hi);
      const __m512i nibbles = _mm512_and_si512(_mm512_srlv_epi32(dwords, shift), _mm512_set1_epi8(0x0f));
      w.q[v] = _mm512_shuffle_epi8(table, nibbles);
    }
    return w;
  }
};

// Sign bytes of the XXS formats (IQ3_XXS, IQ2_XXS): sub-block j's 32-bit word at words + j *
// stride holds four 7-bit indices into ksigns_iq2xs (bits 0..27; the table's byte is the index
// with bit 7 set where that makes the byte's parity even) and the 4-bit scale s_j (bits 28..31).
// signs[u]: the sign bytes of sub-blocks 2u and 2u + 1 (byte 4 (j % 2) + i: index i of j), computed
// (PDEP, then a parity fold) rather than looked up. Returns the codes 1 + 2 s_j, one byte each.
inline uint64_t xxs_signs(const uint8_t* words, int stride, uint64_t signs[4]) {
  uint64_t codes = 0;
  for (int u = 0; u < 4; ++u) {
    uint32_t packed[2];
    std::memcpy(&packed[0], words + 2 * u * stride, 4);
    std::memcpy(&packed[1], words + (2 * u + 1) * stride, 4);
    codes |= uint64_t(1 + 2 * (packed[0] >> 28)) << (16 * u) | uint64_t(1 + 2 * (packed[1] >> 28)) << (16 * u + 8);
    const uint64_t bytes =
        _pdep_u64((packed[0] & 0x0FFFFFFFu) | uint64_t(packed[1] & 0x0FFFFFFFu) << 28, 0x7F7F7F7F7F7F7F7Full);
    uint64_t parity = bytes ^ (bytes >> 4);  // bit 0 of each byte ends as the byte's parity
    parity ^= parity >> 2;
    parity ^= parity >> 1;
    signs[u] = bytes | (parity & 0x0101010101010101ull) << 7;
  }
  return codes;
}

// The negative bytes of vector v (lane p: elements 16p + 4v .. + 3) when sign byte 2p + v / 2 of
// the block (8 per uint64 of signs[]) covers elements 16p + 8 (v / 2) .. + 7: bits 4 (v % 2) .. + 3.
inline __mmask64 negative_bytes(const uint64_t signs[4], int v) {
  static constexpr uint64_t kSignBits[4] = {0x000F000F000F000Full, 0x00F000F000F000F0ull, 0x0F000F000F000F00ull,
                                            0xF000F000F000F000ull};
  uint64_t negative = 0;
  for (int u = 0; u < 4; ++u) negative |= _pext_u64(signs[u], kSignBits[v]) << (16 * u);
  return __mmask64(negative);
}

// IQ3_S: 110 bytes per super-block (F16 d, qs[64], qh[8], signs[32], scales[4]); IQ3_XXS: 98
// bytes (F16 d, qs[64], signs_scales[32]; quant/blocks.h). The 4 values of lane p of vector v
// (elements 16p + 4v ..) are exactly grid entry g = 4p + v, gathered from the format's grid
// (IQ3_S: index qs[g] | bit g % 8 of qh[g / 8] << 8; IQ3_XXS: qs[g]); their signs are bits 4 (v %
// 2) .. + 3 of sign byte 2p + v / 2 (IQ3_S: signs[]; IQ3_XXS: xxs_signs).
// Signed values are stored + kOffset (unsigned for dpbusd: IQ3_S 16, IQ3_XXS 64, above the
// largest grid value); the activations' extra, -kOffset * bsum_p, takes the offset back out.
// Group p's scale is that of sub-block j = p / 2: IQ3_S d (1 + 2 s_j), IQ3_XXS d / 4 (1 + 2 s_j).
template <bool kXxs>
struct Iq3Kernel : OffsetLanesKernel<Iq3Kernel<kXxs>> {
  using W = typename OffsetLanesKernel<Iq3Kernel<kXxs>>::W;
  static constexpr int kOffset = kXxs ? 64 : 16;
  static constexpr int64_t kBlockBytes = kXxs ? 98 : 110, kStepBytes = kBlockBytes;
  // W: signed grid values + kOffset; scale of group p's sub-block.
  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    W w;
    uint64_t codes = 0, signs[4];
    __m512i high_bits = _mm512_setzero_si512();
    if constexpr (kXxs) {
      codes = xxs_signs(p + 66, 4, signs);
    } else {
      for (int j = 0; j < 8; ++j) codes |= uint64_t(1 + 2 * ((p[106 + j / 2] >> (4 * (j % 2))) & 15)) << (8 * j);
      uint64_t qh;
      std::memcpy(&qh, p + 66, 8);
      std::memcpy(signs, p + 74, 32);
      // Lane p: qh[p / 2], shifted so that bit g % 8 = 4 (p % 2) + v comes down for v = 0.
      high_bits = _mm512_srlv_epi32(per_group_bytes(qh), odd_lane_shift(4));
    }
    const float d = fp16_to_f32(load_u16(p)) * (kXxs ? 0.25f : 1.0f);
    w.scale = _mm512_mul_ps(_mm512_cvtepi32_ps(per_group_bytes(codes)), _mm512_set1_ps(d));
    const __m512i qs = _mm512_loadu_si512(p + 2);
    const __m512i offset = _mm512_set1_epi8(kOffset);
    for (int v = 0; v < 4; ++v) {
      __m512i index = _mm512_and_si512(_mm512_srli_epi32(qs, 8 * v), _mm512_set1_epi32(0xff));
      if constexpr (!kXxs) {
        index = _mm512_or_si512(
            index, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(high_bits, v), _mm512_set1_epi32(1)), 8));
      }
      const __m512i grid = _mm512_i32gather_epi32(index, kXxs ? quant::kIQ3XXSGrid : quant::kIQ3SGrid, 4);
      w.q[v] = _mm512_mask_sub_epi8(_mm512_add_epi8(grid, offset), negative_bytes(signs, v), offset, grid);
    }
    return w;
  }
};

// IQ2_XXS: 66 bytes per super-block (F16 d, then per sub-block j of 32 values 8 bytes: four 8-bit
// indices into kIQ2XXSGrid (8 values each), then the word of four 7-bit sign indices and the scale
// s_j; quant/blocks.h). Lane p of vector v (elements 16p + 4v ..) is half v % 2 of grid entry
// 2 (p % 2) + v / 2 of sub-block p / 2: gathered as one int32 of the grid viewed as 512 int32s.
// Signs as IQ3_XXS's (sign byte 2p + v / 2 covers that entry's 8 values). Values + 64 (the grid's
// largest is 43); group p's scale d / 8 (1 + 2 s_j).
struct Iq2XxsKernel : OffsetLanesKernel<Iq2XxsKernel> {
  static constexpr int kOffset = 64;
  static constexpr int64_t kBlockBytes = 66, kStepBytes = kBlockBytes;
  // Lane p: dword 2 (p / 2) of the block's index/sign bytes (sub-block p / 2's four indices).
  static constexpr DwordIndex kIndexDword = [] {
    DwordIndex index{};
    for (int p = 0; p < 16; ++p) index.i[p] = 2 * (p / 2);
    return index;
  }();
  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    W w;
    uint64_t signs[4];
    const uint64_t codes = xxs_signs(p + 6, 8, signs);
    w.scale = _mm512_mul_ps(_mm512_cvtepi32_ps(per_group_bytes(codes)),
                            _mm512_set1_ps(fp16_to_f32(load_u16(p)) * 0.125f));
    const __m512i indices = _mm512_permutexvar_epi32(_mm512_load_si512(kIndexDword.i), _mm512_loadu_si512(p + 2));
    const __m512i offset = _mm512_set1_epi8(kOffset);
    const auto* grid32 = reinterpret_cast<const int*>(quant::kIQ2XXSGrid.data());
    for (int v = 0; v < 4; ++v) {
      // Index byte 2 (p % 2) + v / 2 of the lane's dword; int32 half v % 2 of its grid entry.
      const __m512i byte = _mm512_and_si512(_mm512_srlv_epi32(indices, odd_lane_shift(16)), _mm512_set1_epi32(0xff << (8 * (v / 2))));
      const __m512i index = _mm512_add_epi32(v / 2 ? _mm512_srli_epi32(byte, 7) : _mm512_slli_epi32(byte, 1),
                                             _mm512_set1_epi32(v % 2));
      const __m512i grid = _mm512_i32gather_epi32(index, grid32, 4);
      w.q[v] = _mm512_mask_sub_epi8(_mm512_add_epi8(grid, offset), negative_bytes(signs, v), offset, grid);
    }
    return w;
  }
};

// IQ1_S: 50 bytes per super-block (F16 d, qs[32], qh[8] uint16); IQ1_M: 56 bytes (qs[32],
// qh[16], scales[8], d in the scale words' top nibbles; quant/iq_grids.h). Entry l of sub-block j
// (values 32j + 8l ..) is an 11-bit index into iq1s_grid (-1, 0, 1) with a delta of +-1/8 (IQ1_S:
// one sign per sub-block, IQ1_M: one per entry): times 8 the values are integers 8 g +- 1, stored
// + 9 (0 .. 18, unsigned for dpbusd). Lane p of vector v is half v % 2 of entry 2 (p % 2) + v / 2
// of sub-block p / 2, i.e. entry 2p + v / 2 of the block. Group p's scale: d (2 s + 1) / 8, s of
// sub-block p / 2 (IQ1_S) or of group p itself (IQ1_M: one scale per 16 values).
template <bool kM>
struct Iq1Kernel : OffsetLanesKernel<Iq1Kernel<kM>> {
  using W = typename OffsetLanesKernel<Iq1Kernel<kM>>::W;
  static constexpr int64_t kBlockBytes = kM ? 56 : 50, kStepBytes = kBlockBytes;
  // iq1s_grid as 8 g + 10 per byte (the level with a +1/8 delta, + 9): 2, 10, 18.
  static constexpr std::array<uint64_t, 2048> kGrid = [] {
    std::array<uint64_t, 2048> grid{};
    for (size_t i = 0; i < grid.size(); ++i) {
      for (int j = 0; j < 8; ++j) grid[i] |= uint64_t(8 * quant::iq1_grid_value(quant::kIQ1SGrid[i], j) + 10) << (8 * j);
    }
    return grid;
  }();
  // Vector v, lane p: entry 2p + v / 2 of the block's 32.
  static constexpr DwordIndex entry_of_lane(int half) {
    DwordIndex index{};
    for (int p = 0; p < 16; ++p) index.i[p] = 2 * p + half;
    return index;
  }
  static constexpr DwordIndex kEntry[2] = {entry_of_lane(0), entry_of_lane(1)};

  static constexpr DwordIndex iota_over(int divisor, int base) {  // lane i: base + i / divisor
    DwordIndex index{};
    for (int i = 0; i < 16; ++i) index.i[i] = base + i / divisor;
    return index;
  }
  static constexpr DwordIndex shifts(int step, int period) {  // lane i: step * (i % period)
    DwordIndex index{};
    for (int i = 0; i < 16; ++i) index.i[i] = step * (i % period);
    return index;
  }
  static constexpr DwordIndex kPairOf[2] = {iota_over(2, 0), iota_over(2, 8)};   // IQ1_M qh byte of entry
  static constexpr DwordIndex kQuadOf[2] = {iota_over(4, 0), iota_over(4, 4)};   // IQ1_S qh word of entry
  static constexpr DwordIndex kNibbleShift = shifts(4, 2), kTripleShift = shifts(3, 4);

  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    // Entries 0-15 and 16-31: 2 x the 11-bit grid index (an int32 offset into kGrid viewed as
    // int32 pairs); negative: bit e when entry e's delta is -1/8.
    const uint8_t* qs = p + (kM ? 0 : 2);
    __m512i entry[2];
    uint32_t negative;
    W w;
    if constexpr (kM) {
      // Entry e: qh byte e / 2, nibble e % 2 (bits 0-2: index bits 8-10, bit 3: negative delta).
      const __m512i qh = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32)));
      uint32_t masks[2];
      for (int h = 0; h < 2; ++h) {
        const __m512i nibble = _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_load_si512(kPairOf[h].i), qh),
                                                 _mm512_load_si512(kNibbleShift.i));
        masks[h] = _mm512_test_epi32_mask(nibble, _mm512_set1_epi32(8));
        entry[h] = _mm512_slli_epi32(_mm512_and_si512(nibble, _mm512_set1_epi32(7)), 8);
      }
      negative = masks[0] | masks[1] << 16;
      // Group p's 3-bit scale: bits 3 (p % 4) .. of scale word p / 4; d from the words' top nibbles.
      uint64_t words;
      std::memcpy(&words, p + 48, 8);
      const uint16_t d_bits = uint16_t(_pext_u64(words, 0xF000F000F000F000ull));
      const __m512i scale_words = _mm512_cvtepu16_epi32(_mm256_castsi128_si256(_mm_cvtsi64_si128(int64_t(words))));
      const __m512i codes = _mm512_and_si512(
          _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_load_si512(kQuadOf[0].i), scale_words),
                            _mm512_load_si512(kTripleShift.i)),
          _mm512_set1_epi32(7));
      w.scale = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_add_epi32(codes, codes), _mm512_set1_epi32(1))),
                              _mm512_set1_ps(fp16_to_f32(d_bits) * 0.125f));
    } else {
      // Entry e = 4j + l: bits 3l .. 3l + 2 of qh[j]; qh[j] bits 12-14 the scale, bit 15 the delta.
      uint16_t words[8];
      std::memcpy(words, p + 34, 16);
      const __m512i qh = _mm512_cvtepu16_epi32(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(words))));
      for (int h = 0; h < 2; ++h) {
        const __m512i bits = _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_load_si512(kQuadOf[h].i), qh),
                                               _mm512_load_si512(kTripleShift.i));
        entry[h] = _mm512_slli_epi32(_mm512_and_si512(bits, _mm512_set1_epi32(7)), 8);
      }
      uint64_t codes = 0;
      uint32_t sub_negative = 0;
      for (int j = 0; j < 8; ++j) {
        codes |= uint64_t(1 + 2 * ((words[j] >> 12) & 7)) << (8 * j);
        sub_negative |= uint32_t(words[j] >> 15) << j;
      }
      negative = _pdep_u32(sub_negative, 0x11111111u) * 0xF;  // every entry of the sub-block
      w.scale = _mm512_mul_ps(_mm512_cvtepi32_ps(per_group_bytes(codes)), _mm512_set1_ps(fp16_to_f32(load_u16(p)) * 0.125f));
    }
    for (int h = 0; h < 2; ++h) {
      const __m512i low = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16 * h)));
      entry[h] = _mm512_slli_epi32(_mm512_or_si512(entry[h], low), 1);
    }
    const auto* grid32 = reinterpret_cast<const int*>(kGrid.data());
    for (int v = 0; v < 4; ++v) {
      const __m512i index = _mm512_add_epi32(_mm512_permutex2var_epi32(entry[0], _mm512_load_si512(kEntry[v / 2].i), entry[1]),
                                             _mm512_set1_epi32(v % 2));
      const __m512i grid = _mm512_i32gather_epi32(index, grid32, 4);
      // Lane p's entry 2p + v / 2 has a negative delta: its 4 bytes take 2 off (8 g + 10 -> 8 g + 8).
      const uint64_t lanes = _pext_u32(negative, 0x55555555u << (v / 2));
      w.q[v] = _mm512_mask_sub_epi8(grid, __mmask64(_pdep_u64(lanes, 0x1111111111111111ull) * 0xF), grid,
                                    _mm512_set1_epi8(2));
    }
    return w;
  }
};

constexpr FormatKernels kQ4K{DType::Q4_K, LaneLayout::row_bytes, convert_q8_k_lanes<0>,
                             matmul_tile<Q45KKernel<false>>};
constexpr FormatKernels kQ5K{DType::Q5_K, LaneLayout::row_bytes, convert_q8_k_lanes<0>,
                             matmul_tile<Q45KKernel<true>>};
constexpr FormatKernels kQ6K{DType::Q6_K, LaneLayout::row_bytes, convert_q8_k_lanes<32>, matmul_tile<Q6KKernel>};
constexpr FormatKernels kIq4Xs{DType::IQ4_XS, LaneLayout::row_bytes, convert_q8_k_lanes<128>,
                               matmul_tile<Iq4XsKernel>};
constexpr FormatKernels kIq3S{DType::IQ3_S, LaneLayout::row_bytes, convert_q8_k_lanes<16>,
                              matmul_tile<Iq3Kernel<false>>};
constexpr FormatKernels kIq3Xxs{DType::IQ3_XXS, LaneLayout::row_bytes, convert_q8_k_lanes<64>,
                                matmul_tile<Iq3Kernel<true>>};
constexpr FormatKernels kIq2Xxs{DType::IQ2_XXS, LaneLayout::row_bytes, convert_q8_k_lanes<64>,
                                matmul_tile<Iq2XxsKernel>};
constexpr FormatKernels kIq1S{DType::IQ1_S, LaneLayout::row_bytes, convert_q8_k_lanes<9>, matmul_tile<Iq1Kernel<false>>};
constexpr FormatKernels kIq1M{DType::IQ1_M, LaneLayout::row_bytes, convert_q8_k_lanes<9>, matmul_tile<Iq1Kernel<true>>};

}  // namespace

const FormatKernels* avx512_kquant_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::Q4_K: return &kQ4K;
    case DType::Q5_K: return &kQ5K;
    case DType::Q6_K: return &kQ6K;
    case DType::IQ4_XS: return &kIq4Xs;
    case DType::IQ3_S: return &kIq3S;
    case DType::IQ3_XXS: return &kIq3Xxs;
    case DType::IQ2_XXS: return &kIq2Xxs;
    case DType::IQ1_S: return &kIq1S;
    case DType::IQ1_M: return &kIq1M;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu
