// AVX2 kernel for MXFP4 (quant/blocks.h: an E8M0 exponent and 16 bytes of E2M1 nibbles per 32
// values) against Q8_0 activations, in the grouped layout of kernels_q8_common.h with NB = 2.
//
// A step is 64 values = 2 blocks (17 bytes each). One byte shuffle (pshufb, the table in each
// 128-bit lane) turns the nibbles into the doubled E2M1 levels in [-12, 12]; maddubs needs an
// unsigned operand, so it multiplies |level| by sign(q, level) (q in [-127, 127], so negating it
// is exact). Pair sums are at most 2 x 12 x 127 = 3048, so the two halves' products add in int16
// before one madd. int32 lanes 0-3 belong to block 0 and 4-7 to block 1, as the activation
// layout's scales do; acc += float(lanes) * (scale_w * d_a) per lane, where scale_w = 2^(e - 128)
// is built from its F32 bits as the reference builds it (quant::mxfp4_scale_bits).
#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_q8_common.h"
#include "backend/cpu/kernels_simd_avx2.h"
#include "backend/cpu/kernels_tile.h"
#include "quant/blocks.h"

namespace kestrel::cpu {
namespace {

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// The 16 levels in each 128-bit lane (a plain array: see kernels_tile.h).
struct LevelTable {
  alignas(32) int8_t b[32];
};
constexpr LevelTable kLevels = [] {
  LevelTable table{};
  for (int i = 0; i < 32; ++i) table.b[i] = quant::kMXFP4Levels[i % 16];
  return table;
}();

inline __m256i lookup_levels(__m256i indices) {
  return _mm256_shuffle_epi8(_mm256_load_si256(reinterpret_cast<const __m256i*>(kLevels.b)), indices);
}

struct Mxfp4Kernel {
  using Layout = Q8Layout<2, false>;
  static constexpr int64_t kBlockBytes = 17, kStepBytes = 2 * kBlockBytes;
  static constexpr int kRows = 2, kTokens = 4, kDecodeRows = 2;
  static constexpr int64_t kPackSteps = 16;
  using Acc = __m256;
  struct W {
    __m256i lo, hi;          // levels: [block 0 | block 1] elements 0-15, and 16-31
    __m256i lo_abs, hi_abs;  // their magnitudes
    __m256 scale;            // scale of block 0 in lanes 0-3, of block 1 in lanes 4-7
  };
  struct A {
    __m256i qa, qb;
    __m256 da;
  };
  static int64_t steps(int64_t k) { return (k + 63) / 64; }
  static int64_t direct_steps(int64_t k) { return k / 64; }
  static Acc zero() { return _mm256_setzero_ps(); }
  static W decode(const uint8_t* p) {
    W w;
    nibble_halves(p + 1, p + kBlockBytes + 1, &w.lo, &w.hi);
    w.lo = lookup_levels(w.lo);
    w.hi = lookup_levels(w.hi);
    w.lo_abs = _mm256_abs_epi8(w.lo);
    w.hi_abs = _mm256_abs_epi8(w.hi);
    const uint32_t s0 = quant::mxfp4_scale_bits(p[0]), s1 = quant::mxfp4_scale_bits(p[kBlockBytes]);
    w.scale = _mm256_castsi256_ps(_mm256_setr_epi32(int(s0), int(s0), int(s0), int(s0), int(s1), int(s1), int(s1), int(s1)));
    return w;
  }
  static W load_w(const uint8_t* row, int64_t s) { return decode(row + s * kStepBytes); }
  // A row of an odd number of blocks ends in half a step: its missing block decodes from zero
  // bytes (levels 0, a finite scale; the activations there are zero too), so it adds 0.
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t k) {
    alignas(32) uint8_t step[kStepBytes] = {};
    std::memcpy(step, row + s * kStepBytes, size_t((k - s * 64) / 32 * kBlockBytes));
    return decode(step);
  }
  static A load_a(const uint8_t* act, int64_t s) {
    const uint8_t* g = act + s * Layout::kGroupBytes;
    return {load256(g + Layout::kQsA), load256(g + Layout::kQsB),
            _mm256_loadu_ps(reinterpret_cast<const float*>(g + Layout::kScale))};
  }
  static void mac(Acc& acc, const W& w, const A& a) {
    const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(w.lo_abs, _mm256_sign_epi8(a.qa, w.lo)),
                                           _mm256_maddubs_epi16(w.hi_abs, _mm256_sign_epi8(a.qb, w.hi)));
    const __m256i dot = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(w.scale, a.da), acc);
  }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

constexpr FormatKernels kMxfp4{DType::MXFP4, Q8Layout<2, false>::row_bytes, convert_q8_groups<2, false, 0>,
                               matmul_tile<Mxfp4Kernel>};

}  // namespace

const FormatKernels* avx2_mxfp4_kernels(DType weight_type) {
  return weight_type == DType::MXFP4 ? &kMxfp4 : nullptr;
}

}  // namespace kestrel::cpu
