// AVX2 kernels for llama.cpp's grid formats IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M
// (quant/iq_grids.h) against Q8_K activations (the plain layout of kernels_q8k_common.h); also
// used by the AVX-512 table.
//
// A step is one super-block; each of its 8 sub-blocks of 32 elements decodes into one vector of
// 32 int8 weights as two parts, a magnitude (unsigned) and a sign source, so that
// maddubs(magnitude, sign(q_a, source)) gives exact int16 pair sums, then madd with the
// sub-block's scale (int16, one per 16 elements) gives int32 lanes. Every group of 8 weights is
// one 64-bit grid entry, gathered with four scalar loads per vector.
//  - IQ2: magnitudes are the grid bytes (8, 25, 43); the source is +-1 per byte from the group's
//    sign bits; the scale is 2 s + 1 (the step is d (2 s + 1) / 8). Pair sums <= 2 x 43 x 127.
//  - IQ1: the weight in eighths, 8 grid + delta_sign (in {-9, -7, -1, 1, 7, 9}), is the source
//    and its absolute value the magnitude; the scale is 2 s + 1. Pair sums <= 2 x 9 x 127.
// So a super-block's int32 lanes sum to the reference's exact integer S (quant/iq_grid_quants.cpp)
// and acc = fma(float(S), d_w * d_a, acc) on every path (mac, mac_direct), the row's result
// acc / 8: decode and batches agree bit for bit.
// Prefill decodes each row tile once per chunk of steps into an L1 buffer (kernels_tile.h,
// kPackSteps) and runs every token tile of the block over it.
#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_q8k_common.h"
#include "backend/cpu/kernels_simd_avx2.h"
#include "backend/cpu/kernels_tile.h"
#include "quant/iq_grids.h"

namespace kestrel::cpu {
namespace {

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Lookup tables (plain arrays: see kernels_tile.h).
struct Table64 {
  uint64_t v[2048];
};
// kSigns.v[b]: byte j is -1 (0xff) if bit j of b is set, else +1: a sign source for 8 bytes.
constexpr Table64 kSigns = [] {
  Table64 t{};
  for (int b = 0; b < 256; ++b) {
    for (int j = 0; j < 8; ++j) t.v[b] |= uint64_t((b >> j) & 1 ? 0xff : 0x01) << (8 * j);
  }
  return t;
}();
// The same for IQ2_XXS / IQ2_XS's 7-bit sign indices (through ksigns_iq2xs).
constexpr Table64 kEvenSigns = [] {
  Table64 t{};
  for (int i = 0; i < 128; ++i) t.v[i] = kSigns.v[quant::kIQ2SignBits[i]];
  return t;
}();
// iq1s_grid times 8 (int8 bytes -8, 0, 8); adding the delta sign to each byte gives weights in eighths.
constexpr Table64 kIQ1Grid8 = [] {
  Table64 t{};
  for (int i = 0; i < 2048; ++i) {
    for (int j = 0; j < 8; ++j) t.v[i] |= uint64_t(uint8_t(8 * quant::iq1_grid_value(quant::kIQ1SGrid[i], j))) << (8 * j);
  }
  return t;
}();
constexpr const uint64_t* kGridXXS = quant::kIQ2XXSGrid.data();
constexpr const uint64_t* kGridXS = quant::kIQ2XSGrid.data();
constexpr const uint64_t* kGridS = quant::kIQ2SGrid.data();

inline __m256i gather4(const uint64_t* table, uint32_t i0, uint32_t i1, uint32_t i2, uint32_t i3) {
  return _mm256_set_epi64x(int64_t(table[i3]), int64_t(table[i2]), int64_t(table[i1]), int64_t(table[i0]));
}
// int16 scales: `lo` for elements 0-15 of the sub-block, `hi` for 16-31.
inline __m256i scales16(int lo, int hi) {
  return _mm256_setr_m128i(_mm_set1_epi16(int16_t(lo)), _mm_set1_epi16(int16_t(hi)));
}

// One decoded sub-block.
struct Sub {
  __m256i magnitude, source, scale;
};

// IQ1: magnitudes and sources of weights 8 grid + delta (deltas: one int8 +-1 per group of 8).
inline Sub iq1_sub(__m256i grid8, __m256i deltas, __m256i scale) {
  const __m256i w = _mm256_add_epi8(grid8, deltas);
  return {_mm256_abs_epi8(w), w, scale};
}
inline int64_t delta_bytes(bool negative) { return negative ? -1 : 0x0101010101010101; }

// ---------------------------------------------------------------------------------------------
// Per-format decoding: kBlockBytes, d(p), sub(p, j).

struct IQ2XXS {  // d, then per sub-block j at 2 + 8j: 4 index bytes, a u32 of signs and scale
  static constexpr int64_t kBlockBytes = 66;
  static float d(const uint8_t* p) { return fp16_to_f32(load_u16(p)); }
  static Sub sub(const uint8_t* p, int j) {
    const uint8_t* g = p + 2 + 8 * j;
    const uint32_t s = load_u32(g + 4);
    const int scale = int(2 * (s >> 28) + 1);
    return {gather4(kGridXXS, g[0], g[1], g[2], g[3]),
            gather4(kEvenSigns.v, s & 127, (s >> 7) & 127, (s >> 14) & 127, (s >> 21) & 127), _mm256_set1_epi16(int16_t(scale))};
  }
};

struct IQ2XS {  // d, qs[32] (u16: index bits 0-8, sign index 9-15), scales[8] at 66
  static constexpr int64_t kBlockBytes = 74;
  static float d(const uint8_t* p) { return fp16_to_f32(load_u16(p)); }
  static Sub sub(const uint8_t* p, int j) {
    const uint8_t* g = p + 2 + 8 * j;
    const uint16_t q0 = load_u16(g), q1 = load_u16(g + 2), q2 = load_u16(g + 4), q3 = load_u16(g + 6);
    const int sc = p[66 + j];
    return {gather4(kGridXS, q0 & 511u, q1 & 511u, q2 & 511u, q3 & 511u),
            gather4(kEvenSigns.v, q0 >> 9, q1 >> 9, q2 >> 9, q3 >> 9), scales16(2 * (sc & 15) + 1, 2 * (sc >> 4) + 1)};
  }
};

struct IQ2S {  // d, qs[32] at 2, sign bytes[32] at 34, qh[8] at 66, scales[8] at 74
  static constexpr int64_t kBlockBytes = 82;
  static float d(const uint8_t* p) { return fp16_to_f32(load_u16(p)); }
  static Sub sub(const uint8_t* p, int j) {
    const uint8_t* g = p + 2 + 4 * j;
    const uint8_t* s = p + 34 + 4 * j;
    const uint32_t h = p[66 + j];
    const int sc = p[74 + j];
    return {gather4(kGridS, g[0] | (h & 3) << 8, g[1] | (h & 12) << 6, g[2] | (h & 48) << 4, g[3] | (h & 192) << 2),
            gather4(kSigns.v, s[0], s[1], s[2], s[3]), scales16(2 * (sc & 15) + 1, 2 * (sc >> 4) + 1)};
  }
};

struct IQ1S {  // d, qs[32] at 2, qh[8] (u16) at 34: index bits 8-10 per group, scale 12-14, delta sign 15
  static constexpr int64_t kBlockBytes = 50;
  static float d(const uint8_t* p) { return fp16_to_f32(load_u16(p)); }
  static Sub sub(const uint8_t* p, int j) {
    const uint8_t* g = p + 2 + 4 * j;
    const uint32_t h = load_u16(p + 34 + 2 * j);
    const __m256i grid = gather4(kIQ1Grid8.v, g[0] | (h & 7) << 8, g[1] | (h & 0x38) << 5, g[2] | (h & 0x1c0) << 2,
                                 g[3] | (h & 0xe00) >> 1);
    return iq1_sub(grid, _mm256_set1_epi64x(delta_bytes(h & 0x8000)), _mm256_set1_epi16(int16_t(2 * ((h >> 12) & 7) + 1)));
  }
};

struct IQ1M {  // qs[32], qh[16] at 32, 4 scale words at 48 (d's F16 bits in their top nibbles)
  static constexpr int64_t kBlockBytes = 56;
  static float d(const uint8_t* p) {
    const uint64_t words = uint64_t(load_u32(p + 48)) | uint64_t(load_u32(p + 52)) << 32;
    const uint16_t bits = uint16_t(((words >> 12) & 0x000f) | ((words >> 24) & 0x00f0) | ((words >> 36) & 0x0f00) |
                                   ((words >> 48) & 0xf000));
    return fp16_to_f32(bits);
  }
  static Sub sub(const uint8_t* p, int j) {
    const uint8_t* g = p + 4 * j;
    const uint32_t h0 = p[32 + 2 * j], h1 = p[33 + 2 * j];
    const uint32_t word = load_u16(p + 48 + 2 * (j / 2)) >> (6 * (j % 2));
    const __m256i grid = gather4(kIQ1Grid8.v, g[0] | (h0 & 7) << 8, g[1] | (h0 & 0x70) << 4, g[2] | (h1 & 7) << 8,
                                 g[3] | (h1 & 0x70) << 4);
    const __m256i deltas = _mm256_setr_epi64x(delta_bytes(h0 & 0x08), delta_bytes(h0 & 0x80), delta_bytes(h1 & 0x08),
                                              delta_bytes(h1 & 0x80));
    return iq1_sub(grid, deltas, scales16(2 * (word & 7) + 1, 2 * ((word >> 3) & 7) + 1));
  }
};

// ---------------------------------------------------------------------------------------------
// The matrix policy (kernels_tile.h), the same for the five formats.

template <class F>
struct GridKernel {
  static constexpr int64_t kBlockBytes = F::kBlockBytes, kStepBytes = kBlockBytes;
  static constexpr int kRows = 4, kTokens = 2, kDecodeRows = 2;
  static constexpr int64_t kPackSteps = 4;  // 4 rows x 4 steps x 800 bytes of W: 12.5 KB of L1
  using Acc = float;
  struct A {
    const uint8_t* block;
    __m256i q(int j) const { return load256(block + Q8KLayout::kQs + 32 * j); }
    float d() const { return load_f32(block + Q8KLayout::kScale); }
  };
  struct W {
    Sub sub[8];
    float d;
  };
  static int64_t steps(int64_t k) { return k / 256; }
  static int64_t direct_steps(int64_t k) { return k / 256; }
  static Acc zero() { return 0.0f; }

  // Sub-block lanes: scale x (weights . q), exact.
  static __m256i lanes(const Sub& s, __m256i q) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(s.magnitude, _mm256_sign_epi8(q, s.source)), s.scale);
  }
  static void finish_block(Acc& acc, __m256i sum, float d, const A& a) {
    acc = fma1(float(hsum_epi32(sum)), d * a.d(), acc);
  }

  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    W w;
    for (int j = 0; j < 8; ++j) w.sub[j] = F::sub(p, j);
    w.d = F::d(p);
    return w;
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t) { return load_w(row, s); }
  static A load_a(const uint8_t* act, int64_t s) { return {act + s * Q8KLayout::kBlockBytes}; }
  static void mac(Acc& acc, const W& w, const A& a) {
    __m256i sum = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) sum = _mm256_add_epi32(sum, lanes(w.sub[j], a.q(j)));
    finish_block(acc, sum, w.d, a);
  }
  // One token: decode each sub-block as it is used (no W stored).
  static void mac_direct(Acc& acc, const uint8_t* row, int64_t s, const A& a) {
    const uint8_t* p = row + s * kBlockBytes;
    __m256i sum = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) sum = _mm256_add_epi32(sum, lanes(F::sub(p, j), a.q(j)));
    finish_block(acc, sum, F::d(p), a);
  }
  static float finish(Acc acc, const uint8_t*) { return acc * 0.125f; }
};

constexpr FormatKernels kIQ2XXS{DType::IQ2_XXS, Q8KLayout::row_bytes, convert_q8_k, matmul_tile<GridKernel<IQ2XXS>>};
constexpr FormatKernels kIQ2XS{DType::IQ2_XS, Q8KLayout::row_bytes, convert_q8_k, matmul_tile<GridKernel<IQ2XS>>};
constexpr FormatKernels kIQ2S{DType::IQ2_S, Q8KLayout::row_bytes, convert_q8_k, matmul_tile<GridKernel<IQ2S>>};
constexpr FormatKernels kIQ1S{DType::IQ1_S, Q8KLayout::row_bytes, convert_q8_k, matmul_tile<GridKernel<IQ1S>>};
constexpr FormatKernels kIQ1M{DType::IQ1_M, Q8KLayout::row_bytes, convert_q8_k, matmul_tile<GridKernel<IQ1M>>};

}  // namespace

const FormatKernels* avx2_iq_grid_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::IQ2_XXS: return &kIQ2XXS;
    case DType::IQ2_XS: return &kIQ2XS;
    case DType::IQ2_S: return &kIQ2S;
    case DType::IQ1_S: return &kIQ1S;
    case DType::IQ1_M: return &kIQ1M;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu
