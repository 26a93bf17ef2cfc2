// AVX2 kernels for the non-linear 4-bit formats (quant/blocks.h): llama.cpp's IQ4_NL and
// bitsandbytes' NF4 against Q8_0 activations (the grouped layout of kernels_q8_common.h, NB = 2)
// and IQ4_XS against Q8_K (the plain layout of kernels_q8k_common.h). The AVX-512 table has
// kernels of its own for all three (kernels_q8_avx512.cpp, kernels_iq_avx512.cpp).
//
// A nibble indexes one of 16 signed levels in [-127, 113]; one byte shuffle (pshufb, the table in
// each 128-bit lane) turns 32 nibbles into 32 int8 levels. maddubs needs an unsigned operand and
// levels + 128 would overflow its int16 pair sums (2 x 241 x 127 > 32767), so the kernels use the
// sign trick: maddubs(|level|, sign(q_a, level)) multiplies the same values (q_a is in [-127,
// 127], so negating it is exact) with pair sums of at most 2 x 127 x 127 < 32767, and each
// maddubs result goes through its own madd (two of them could overflow int16). The decoded steps
// keep both the levels and their magnitudes, so mac spends one sign per vector.
//
// IQ4_NL: a step is 64 elements = 2 blocks (18 bytes each: F16 d, 16 bytes of nibbles, element j
// low and j + 16 high). int32 lanes 0-3 of the products belong to block 0, 4-7 to block 1, as the
// activation layout's scales do, so acc += float(lanes) * (d_w * d_a) per lane, as the other
// Q8_0 formats' AVX2 kernels (kernels_q8_avx2.cpp) do.
// NF4: a step is one block (34 bytes: F16 d, 32 bytes of nibbles, element i in byte i % 32, low
// nibble for i < 32). Its int16 levels (code * 16256) split exactly into 128 * hi + lo with int8 hi
// and |lo| <= 64 (nf4_level_high/low), two shuffles per nibble vector; the int32 lanes are then
// 128 * madd(hi products) + madd(lo products), the reference's exact integer sums.
// IQ4_XS: a step is one super-block (136 bytes: F16 d, scales_h, scales_l[4], qs[128]). Each
// 32-element sub-block is one vector; its madd with the sub-block's signed scale (ls - 32, int16)
// gives int32 lanes, summed exactly over the super-block; a (row, token) accumulator keeps 8 float
// lanes, acc = fma(float(lanes), d_w * d_a, acc), and is summed horizontally once at the end (a
// horizontal integer sum and a scalar FMA per super-block cost a third of the prefill time). Every
// path (mac, mac_direct, the 4-row prefill tile SubBlockRows4, kernels_subblock_rows_avx2.h) runs these operations lane for
// lane, so decode and batches agree bit for bit.
#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_q8_common.h"
#include "backend/cpu/kernels_q8k_common.h"
#include "backend/cpu/kernels_simd_avx2.h"
#include "backend/cpu/kernels_subblock_rows_avx2.h"
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
  for (int i = 0; i < 32; ++i) table.b[i] = quant::kIQ4Levels[i % 16];
  return table;
}();

constexpr LevelTable kNf4High = [] {
  LevelTable table{};
  for (int i = 0; i < 32; ++i) table.b[i] = quant::nf4_level_high(i % 16);
  return table;
}();
constexpr LevelTable kNf4Low = [] {
  LevelTable table{};
  for (int i = 0; i < 32; ++i) table.b[i] = quant::nf4_level_low(i % 16);
  return table;
}();

// Entries of `table` at 32 nibble indices (each byte < 16).
inline __m256i lookup(const LevelTable& table, __m256i indices) {
  return _mm256_shuffle_epi8(_mm256_load_si256(reinterpret_cast<const __m256i*>(table.b)), indices);
}
inline __m256i lookup_levels(__m256i indices) { return lookup(kLevels, indices); }

// Int16 pair sums of levels x q (|levels| given as `magnitude`): exact, at most 2 x 127 x 127.
inline __m256i signed_products(__m256i magnitude, __m256i levels, __m256i q) {
  return _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(q, levels));
}

// ---------------------------------------------------------------------------------------------
// IQ4_NL x Q8_0

struct Iq4NlKernel {
  using Layout = Q8Layout<2, false>;
  static constexpr int64_t kBlockBytes = 18, kStepBytes = 2 * kBlockBytes;
  static constexpr int kRows = 2, kTokens = 4, kDecodeRows = 2;
  static constexpr int64_t kPackSteps = 16;
  using Acc = __m256;
  struct W {
    __m256i lo, hi;          // levels: [block 0 | block 1] elements 0-15, and 16-31
    __m256i lo_abs, hi_abs;  // their magnitudes
    __m256 scale;            // d of block 0 in lanes 0-3, of block 1 in lanes 4-7
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
    nibble_halves(p + 2, p + kBlockBytes + 2, &w.lo, &w.hi);
    w.lo = lookup_levels(w.lo);
    w.hi = lookup_levels(w.hi);
    w.lo_abs = _mm256_abs_epi8(w.lo);
    w.hi_abs = _mm256_abs_epi8(w.hi);
    const uint32_t d = uint32_t(load_u16(p)) | uint32_t(load_u16(p + kBlockBytes)) << 16;
    w.scale = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_cvtph_ps(_mm_cvtsi32_si128(int(d)))),
                                       _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
    return w;
  }
  static W load_w(const uint8_t* row, int64_t s) { return decode(row + s * kStepBytes); }
  // A row of an odd number of blocks ends in half a step: its missing block decodes from zero
  // bytes (d = 0; the activations there are zero too), so it adds 0.
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
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(signed_products(w.lo_abs, w.lo, a.qa), ones),
                                         _mm256_madd_epi16(signed_products(w.hi_abs, w.hi, a.qb), ones));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(w.scale, a.da), acc);
  }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

// ---------------------------------------------------------------------------------------------
// NF4 x Q8_0

struct Nf4Kernel {
  using Layout = Q8Layout<2, false>;
  static constexpr int64_t kBlockBytes = 34, kStepBytes = kBlockBytes;
  static constexpr int kRows = 2, kTokens = 4, kDecodeRows = 2;
  static constexpr int64_t kPackSteps = 16;
  using Acc = __m256;
  // One table's int8 entries for the step's elements as the activation layout holds them, and
  // their magnitudes: a = [activation block 0 | block 1] elements 0-15, b = elements 16-31.
  struct Half {
    __m256i a, b, a_abs, b_abs;
  };
  struct W {
    Half high, low;
    __m256 scale;  // d / 16256 in every lane
  };
  struct A {
    __m256i qa, qb;
    __m256 da;
  };
  static int64_t steps(int64_t k) { return k / 64; }
  static int64_t direct_steps(int64_t k) { return k / 64; }
  static Acc zero() { return _mm256_setzero_ps(); }
  // Indices of 16 bytes' elements: low nibbles (block 0's values) in lane 0, high ones in lane 1.
  static __m256i indices(const uint8_t* p) {
    const __m256i bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_and_si256(_mm256_srlv_epi32(bytes, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0f));
  }
  static Half half(const LevelTable& table, __m256i ia, __m256i ib) {
    Half h;
    h.a = lookup(table, ia);
    h.b = lookup(table, ib);
    h.a_abs = _mm256_abs_epi8(h.a);
    h.b_abs = _mm256_abs_epi8(h.b);
    return h;
  }
  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kStepBytes;
    const __m256i ia = indices(p + 2), ib = indices(p + 18);
    W w;
    w.high = half(kNf4High, ia, ib);
    w.low = half(kNf4Low, ia, ib);
    w.scale = _mm256_set1_ps(fp16_to_f32(load_u16(p)) / float(quant::kNF4LevelScale));
    return w;
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t) { return load_w(row, s); }
  static A load_a(const uint8_t* act, int64_t s) {
    const uint8_t* g = act + s * Layout::kGroupBytes;
    return {load256(g + Layout::kQsA), load256(g + Layout::kQsB),
            _mm256_loadu_ps(reinterpret_cast<const float*>(g + Layout::kScale))};
  }
  static void mac(Acc& acc, const W& w, const A& a) {
    // hi pair sums reach 2 x 127 x 127, so each gets its own madd (x 128); lo ones at most
    // 2 x 64 x 127, so a's and b's share one int16 sum.
    const __m256i high = _mm256_add_epi32(
        _mm256_madd_epi16(signed_products(w.high.a_abs, w.high.a, a.qa), _mm256_set1_epi16(128)),
        _mm256_madd_epi16(signed_products(w.high.b_abs, w.high.b, a.qb), _mm256_set1_epi16(128)));
    const __m256i low = _mm256_madd_epi16(
        _mm256_add_epi16(signed_products(w.low.a_abs, w.low.a, a.qa), signed_products(w.low.b_abs, w.low.b, a.qb)),
        _mm256_set1_epi16(1));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(high, low)), _mm256_mul_ps(w.scale, a.da), acc);
  }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

// ---------------------------------------------------------------------------------------------
// IQ4_XS x Q8_K

struct Iq4XsKernel {
  static constexpr int64_t kBlockBytes = 136, kStepBytes = kBlockBytes;
  static constexpr int kRows = 4, kTokens = 2, kDecodeRows = 2;
  static constexpr int64_t kPackSteps = 4;  // 4 rows x 4 steps x 800 bytes of W: 12.5 KB of L1
  using Acc = __m256;
  struct A {
    const uint8_t* block;
    __m256i q(int j) const { return load256(block + Q8KLayout::kQs + 32 * j); }
    float d() const { return load_f32(block + Q8KLayout::kScale); }
  };
  struct W {
    __m256i sign[8];       // sub-block j's levels (elements 32j .. 32j + 31), the sign source
    __m256i magnitude[8];  // their magnitudes
    __m256i scale[8];   // sub-block j's signed scale in every int16 lane
    float d;
  };
  static int64_t steps(int64_t k) { return k / 256; }
  static int64_t direct_steps(int64_t k) { return k / 256; }
  static Acc zero() { return _mm256_setzero_ps(); }

  static float block_d(const uint8_t* p) { return fp16_to_f32(load_u16(p)); }
  // The 8 signed sub-block scales (ls - 32) as int16, in both 128-bit lanes.
  static __m256i block_scales(const uint8_t* p) {
    const __m128i codes = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(unpack_iq4xs_codes(p))));
    return _mm256_broadcastsi128_si256(_mm_sub_epi16(codes, _mm_set1_epi16(32)));
  }
  // Scale j of block_scales in every int16 lane.
  static __m256i spread(__m256i scales, int j) {
    return _mm256_shuffle_epi8(scales, _mm256_set1_epi16(int16_t(0x0100 + 0x0202 * j)));
  }
  // Levels of sub-block j: its 16 bytes' low nibbles (elements 0-15), then high nibbles (16-31).
  static __m256i levels(const uint8_t* p, int j) {
    const __m256i bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8 + 16 * j)));
    const __m256i shifted = _mm256_srlv_epi32(bytes, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    return lookup_levels(_mm256_and_si256(shifted, _mm256_set1_epi8(0x0f)));
  }
  // The int32 lanes of sub-block j's contribution: scale_j x (levels . q).
  static __m256i sub_block(__m256i magnitude, __m256i lv, __m256i scale, __m256i q) {
    return _mm256_madd_epi16(signed_products(magnitude, lv, q), scale);
  }
  static void finish_block(Acc& acc, __m256i lanes, float d, const A& a) {
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(d * a.d()), acc);
  }

  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    W w;
    w.d = block_d(p);
    const __m256i scales = block_scales(p);
    for (int j = 0; j < 8; ++j) {
      w.sign[j] = levels(p, j);
      w.magnitude[j] = _mm256_abs_epi8(w.sign[j]);
      w.scale[j] = spread(scales, j);
    }
    return w;
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t) { return load_w(row, s); }
  static A load_a(const uint8_t* act, int64_t s) { return {act + s * Q8KLayout::kBlockBytes}; }
  static void mac(Acc& acc, const W& w, const A& a) {
    __m256i lanes = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) lanes = _mm256_add_epi32(lanes, sub_block(w.magnitude[j], w.sign[j], w.scale[j], a.q(j)));
    finish_block(acc, lanes, w.d, a);
  }
  // The super-block's int32 lanes, decoding one sub-block at a time (one token: no W stored).
  static __m256i direct_lanes(const uint8_t* p, const A& a) {
    const __m256i scales = block_scales(p);
    __m256i lanes = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i lv = levels(p, j);
      lanes = _mm256_add_epi32(lanes, sub_block(_mm256_abs_epi8(lv), lv, spread(scales, j), a.q(j)));
    }
    return lanes;
  }
  static void mac_direct(Acc& acc, const uint8_t* row, int64_t s, const A& a) {
    const uint8_t* p = row + s * kBlockBytes;
    finish_block(acc, direct_lanes(p, a), block_d(p), a);
  }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

constexpr FormatKernels kIq4Nl{DType::IQ4_NL, Q8Layout<2, false>::row_bytes, convert_q8_groups<2, false, 0>,
                               matmul_tile<Iq4NlKernel>};
constexpr FormatKernels kNf4{DType::NF4, Q8Layout<2, false>::row_bytes, convert_q8_groups<2, false, 0>,
                             matmul_tile<Nf4Kernel>};
constexpr FormatKernels kIq4Xs{DType::IQ4_XS, Q8KLayout::row_bytes, convert_q8_k, interleaved_matmul<SubBlockRows4<Iq4XsKernel>>};

}  // namespace

const FormatKernels* avx2_iq4_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::IQ4_NL: return &kIq4Nl;
    case DType::IQ4_XS: return &kIq4Xs;
    case DType::NF4: return &kNf4;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu
