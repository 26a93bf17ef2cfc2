// The lane-major layout the AVX-512 k-quant and IQ kernels share (kernels_kquant_avx512.cpp,
// kernels_iq_avx512.cpp): Q8_K activations reordered so that one int32 lane holds one group of 16
// elements, and the tile parts every "offset lanes" kernel has in common.
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
// Include only from *_avx512.cpp files: the rest of the including file is compiled for GFNI too.
#pragma once

// GCC 12 reports its own _mm512_undefined_* helpers as uninitialised once inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// GF2P8AFFINEQB (gather_bits); has_avx512_set() requires GFNI before these kernels may run.
#pragma GCC target("gfni")

#include <cstdint>
#include <cstring>

#include "backend/cpu/kernels_q8k_common.h"
#include "backend/cpu/kernels_simd_avx512.h"

namespace kestrel::cpu::lanes_avx512 {

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
inline constexpr ByteIndex kSubBlockOfGroup = [] {
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

}  // namespace kestrel::cpu::lanes_avx512
