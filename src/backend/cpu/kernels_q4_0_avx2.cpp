// AVX2 kernels for the symmetric 4- and 5-bit formats with 32-element blocks and an F16 scale:
// Q4_0 and INT4_SYM_G32 (the same layout: d, 16 bytes of nibbles; value = level - 8) and Q5_0
// (d, qh[4], qs[16]; value = level - 16), against Q8_0 activations.
//
// Levels are unsigned, so maddubs multiplies them with the signed activations directly, and up
// to 4 maddubs results add up in int16 before one madd (4 x 2 x 31 x 127 < 32767). Prefill tiles
// interleave 4 weight rows 8 levels at a time (kernels_interleave_avx2.h), so one maddubs against
// a token's 8 broadcast activation bytes serves 4 rows and one madd a block of 4 rows; Kestrel's
// row-major tiles needed one madd per 2 maddubs and one float tail per block and row. The level
// offset C comes off each block's exact sum as C times the block's activation sum (precomputed),
// and blocks are accumulated as in kernels_q8_0_avx2.cpp (exact block dots, even/odd-block FMAs),
// so decode, small batches and the interleaved tiles give bitwise the same results.
//
// Activation row layout (LevelSteps): steps of 64 elements = 2 blocks, zero past k,
//   qa[32]    int8: elements 0-15 of block 0, then of block 1
//   qb[32]    int8: elements 16-31 of block 0, then of block 1
//   corr[8]   int32: C s0, C s1 as d0, d1 below (s_b = the block's sum of q)
//   da[8]     F32: d0, d0, d1, d1, d0, d0, d1, d1 (the blocks' scales, F16-rounded)
// Weight steps decode to the same halves (lo = [block 0 | block 1] levels 0-15, hi = 16-31), so
// decode multiplies both blocks with one maddubs per half and reduces 2 rows x 2 blocks in two
// hadds; the prefill pack cuts the halves into 8-level groups, each contiguous in qa or qb.
#include "backend/cpu/kernels_interleave_avx2.h"
#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_q8_common.h"
#include "backend/cpu/kernels_simd_avx2.h"
#include "backend/cpu/kernels_tile.h"

namespace kestrel::cpu {
namespace {

struct LevelSteps {
  static constexpr int64_t kElements = 64, kQa = 0, kQb = 32, kCorr = 64, kScale = 96, kBytes = 128;
  static int64_t steps(int64_t k) { return (k + kElements - 1) / kElements; }
  static int64_t row_bytes(int64_t k) { return steps(k) * kBytes; }
};

template <int C>
void convert_level_activations(const float* x, uint8_t* out, int64_t k) {
  quantize_block_pairs(x, out, k, LevelSteps::kBytes, [](uint8_t* step, int half, const int8_t* q, float d, int32_t q_sum) {
    std::memcpy(step + LevelSteps::kQa + 16 * half, q, 16);
    std::memcpy(step + LevelSteps::kQb + 16 * half, q + 16, 16);
    const int32_t corr = C * q_sum;
    store_half_lanes(step + LevelSteps::kCorr, half, &corr);
    store_half_lanes(step + LevelSteps::kScale, half, &d);
  });
}

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// The levels of a step's two blocks as halves: lo = [block 0 | block 1] elements 0-15, hi = 16-31.
struct LevelHalves {
  __m256i lo, hi;
};

struct Q4_0Blocks {
  static constexpr int C = 8;
  static constexpr int64_t kBlockBytes = 18;
  static LevelHalves halves(const uint8_t* b0, const uint8_t* b1) {
    LevelHalves h;
    nibble_halves(b0 + 2, b1 + 2, &h.lo, &h.hi);
    return h;
  }
};

struct Q5_0Blocks {
  static constexpr int C = 16;
  static constexpr int64_t kBlockBytes = 22;
  static LevelHalves halves(const uint8_t* b0, const uint8_t* b1) {
    LevelHalves h;
    five_bit_halves(b0 + 2, b0 + 6, b1 + 2, b1 + 6, &h.lo, &h.hi);
    return h;
  }
};

// A zero block for the missing second block of a row's last step.
alignas(32) const uint8_t kZeroBlock[32] = {};

// Row-major policy (kernels_tile.h): decode, batches under kInterleavedTokens, rows % 4.
template <class B>
struct LevelKernel : BlockPairPolicy<LevelSteps> {
  static constexpr int kRows = 2, kTokens = 4, kDecodeRows = 4;
  static constexpr int64_t kStepBytes = 2 * B::kBlockBytes;  // one-token tiles prefetch
  struct W {
    LevelHalves levels;
    __m128 scale;  // the 2 blocks' d, 0, 0
  };
  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kStepBytes;
    const uint8_t* p1 = p + B::kBlockBytes;
    const uint32_t d = uint32_t(load_u16(p)) | uint32_t(load_u16(p1)) << 16;
    return {B::halves(p, p1), _mm_cvtph_ps(_mm_cvtsi32_si128(int(d)))};
  }
  // The last step of a row of an odd number of blocks: its second block is zero (d = 0 too).
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t) {
    const uint8_t* p = row + s * kStepBytes;
    return {B::halves(p, kZeroBlock), _mm_cvtph_ps(_mm_cvtsi32_si128(int(load_u16(p))))};
  }
  // Int32 lanes of the step's level x activation products: 4 of block 0, then 4 of block 1 (the
  // two maddubs add up in int16: 2 x 2 x 31 x 127 < 32767).
  static __m256i step_lanes(const LevelHalves& w, const A& a) {
    const __m256i lo = _mm256_maddubs_epi16(w.lo, load256(a.step + LevelSteps::kQa));
    const __m256i hi = _mm256_maddubs_epi16(w.hi, load256(a.step + LevelSteps::kQb));
    return _mm256_madd_epi16(_mm256_add_epi16(lo, hi), _mm256_set1_epi16(1));
  }
  // (C s0, C s1, C s0, C s1) of the activation step.
  static __m128i act_corr(const A& a) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.step + LevelSteps::kCorr));
    return _mm_shuffle_epi32(lo, _MM_SHUFFLE(2, 0, 2, 0));
  }
  // (D0, D1 of x, D0, D1 of y) from two step_lanes results (exact).
  static __m128i two_rows(__m256i x, __m256i y) {
    const __m256i pairs = _mm256_hadd_epi32(x, y);        // x01 x23 y01 y23 | x45 x67 y45 y67
    const __m256i quads = _mm256_hadd_epi32(pairs, pairs);  // x0 y0 x0 y0 | x1 y1 x1 y1
    return _mm_unpacklo_epi32(_mm256_castsi256_si128(quads), _mm256_extracti128_si256(quads, 1));
  }
  static void mac(Acc& acc, const W& w, const A& a) {
    const __m256i x = step_lanes(w.levels, a);
    const __m128i dots = _mm_sub_epi32(two_rows(x, x), act_corr(a));  // D0, D1, D0, D1
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(dots), _mm_mul_ps(w.scale, act_scales(a)), acc);
  }
  static void mac_direct(Acc& acc, const uint8_t* row, int64_t s, const A& a) { mac(acc, load_w(row, s), a); }
  // Two rows: acc0 carries both rows' E, O (lanes 2, 3: row 1's, which only this reads; mac never
  // changes them) and acc1 gets row 1's copy, so the chain from step to step is one FMA.
  static void mac_direct2(Acc& acc0, Acc& acc1, const uint8_t* row0, const uint8_t* row1, int64_t s, const A& a) {
    const uint8_t* p0 = row0 + s * kStepBytes;
    const uint8_t* p1 = row1 + s * kStepBytes;
    const __m256i x0 = step_lanes(B::halves(p0, p0 + B::kBlockBytes), a);
    const __m256i x1 = step_lanes(B::halves(p1, p1 + B::kBlockBytes), a);
    const __m128i dots = _mm_sub_epi32(two_rows(x0, x1), act_corr(a));
    // d0, d1 of row 0, then of row 1, in one conversion.
    const uint64_t d = uint64_t(load_u16(p0)) | uint64_t(load_u16(p0 + B::kBlockBytes)) << 16 |
                       uint64_t(load_u16(p1)) << 32 | uint64_t(load_u16(p1 + B::kBlockBytes)) << 48;
    const __m128 scale = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi64_si128(int64_t(d))), act_scales(a));
    acc0 = _mm_fmadd_ps(_mm_cvtepi32_ps(dots), scale, acc0);
    acc1 = _mm_movehl_ps(acc0, acc0);
  }
};

// Prefill: one step of 4 rows.
struct LevelInterleaved4 {
  // [j]: bytes 8j .. 8j + 7 of rows 0, 1, 2, 3's lo (j < 4) or hi (j - 4) half: block j / 2 % 2's
  // levels 8 (j % 2) .. + 7 (lo) or 16 + 8 (j % 2) .. + 7 (hi).
  __m256i levels[8];
  __m256 scale;       // d0 r0, d0 r1, d1 r0, d1 r1 | the same of rows 2, 3
};

template <class B>
struct LevelInterleave : BlockPairInterleaveSteps<LevelSteps> {  // a chunk: 4.5 KB of decoded rows
  using Kernel = LevelKernel<B>;
  using Block = LevelInterleaved4;
  static void interleave(const uint8_t* w, int64_t w_stride, int64_t s, int64_t k, Block& out) {
    typename Kernel::W rows[4];
    decode_4_rows<Kernel>(w, w_stride, s, k, rows);
    const __m256i lo[4] = {rows[0].levels.lo, rows[1].levels.lo, rows[2].levels.lo, rows[3].levels.lo};
    const __m256i hi[4] = {rows[0].levels.hi, rows[1].levels.hi, rows[2].levels.hi, rows[3].levels.hi};
    interleave_rows(lo, &out.levels[0]);
    interleave_rows(hi, &out.levels[4]);
    out.scale = interleaved_scales(rows[0].scale, rows[1].scale, rows[2].scale, rows[3].scale);
  }
  template <int T>
  static void step(const Block& b, const uint8_t* const a[T], Acc acc[T]) {
    __m256i sums[2][T];  // [block][token]: 2 int32 lanes per row, as the scale vector's halves
#pragma GCC unroll 2
    for (int block = 0; block < 2; ++block) {
      __m256i s16[T];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) s16[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const int j = (g / 2) * 4 + 2 * block + g % 2;  // lo groups, then hi groups, of this block
        const __m256i w = b.levels[j];
        const int64_t offset = (g < 2 ? LevelSteps::kQa : LevelSteps::kQb) + 16 * block + 8 * (g % 2);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          int64_t eight;  // 8 activation bytes
          std::memcpy(&eight, a[t] + offset, 8);
          s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(w, _mm256_set1_epi64x(eight)));
          __asm__("" : "+x"(s16[t]));  // as in kernels_q8_0_avx2.cpp: keeps the sums in registers
        }
      }
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) sums[block][t] = _mm256_madd_epi16(s16[t], _mm256_set1_epi16(1));
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256i corr = load256(a[t] + LevelSteps::kCorr);
      const __m256i dots = _mm256_sub_epi32(_mm256_hadd_epi32(sums[0][t], sums[1][t]), corr);
      const __m256 da = _mm256_loadu_ps(reinterpret_cast<const float*>(a[t] + LevelSteps::kScale));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), _mm256_mul_ps(b.scale, da), acc[t]);
    }
  }
};

template <class B>
constexpr FormatKernels level_kernels(DType type) {
  return {type, LevelSteps::row_bytes, convert_level_activations<B::C>, interleaved_matmul<LevelInterleave<B>>};
}

constexpr FormatKernels kQ4_0 = level_kernels<Q4_0Blocks>(DType::Q4_0);
constexpr FormatKernels kInt4Sym32 = level_kernels<Q4_0Blocks>(DType::INT4_SYM_G32);
constexpr FormatKernels kQ5_0 = level_kernels<Q5_0Blocks>(DType::Q5_0);

}  // namespace

const FormatKernels* avx2_q4_0_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::Q4_0: return &kQ4_0;
    case DType::INT4_SYM_G32: return &kInt4Sym32;
    case DType::Q5_0: return &kQ5_0;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu
