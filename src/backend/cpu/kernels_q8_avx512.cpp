// AVX-512 VNNI kernels for the formats whose activations are Q8_0 or Q8_1: Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, IQ4_NL, MXFP4, NF4, INT8_PC, INT4_SYM_G32/64/128 (G32 is byte-identical to Q4_0), INT4_ASYM_G32/64/128
// (G32 is byte-identical to Q4_1), INT4_ZP_G32/64/128 and INT3_ASYM_G64/128, INT2_ASYM_G64/128.
//
// One step is 128 elements = four activation blocks of 32. A weight decoder turns a step of a
// weight row into two 64-byte vectors of unsigned levels (q + C for signed formats) arranged like
// the activation layout of kernels_q8_common.h — 16 bytes of each activation block per vector —
// plus each lane's weight scale (and min, for the asymmetric formats). Then, per (row, token):
//   int32 lanes  = corr + dpbusd(levels_a, qs_a) + dpbusd(levels_b, qs_b)   (exact; corr removes C)
//   acc         += float(lanes) * (weight scale * activation scale)          (one rounding each)
//   acc         += weight min * s                                            (asymmetric only)
// Every lane belongs to one activation block (and one weight block), so the integer part of a
// block is exact and only one multiply-add per four lanes is done in float.
// GCC 12 reports its own _mm512_undefined_* helpers as uninitialised once inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_q8_common.h"
#include "backend/cpu/kernels_simd_avx512.h"
#include "backend/cpu/kernels_tile.h"
#include "quant/blocks.h"

#include <tuple>
#include <utility>

namespace kestrel::cpu {
namespace {

struct WeightStep {
  __m512i a, b;
  __m512 scale, min;
};

// F16 values at p and p + stride widened to F32 (in lanes 0 and 1); spread2 puts lane 0 over
// lanes 0-7 and lane 1 over 8-15; scales2 does both. scales1: one F16 over all 16 lanes.
inline __m128 halves2(const uint8_t* p, int64_t stride) {
  const uint32_t h = uint32_t(load_u16(p)) | uint32_t(load_u16(p + stride)) << 16;
  return _mm_cvtph_ps(_mm_cvtsi32_si128(int(h)));
}
inline __m512 spread2(__m128 f) {
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                               _mm512_castps128_ps512(f));
}
inline __m512 scales2(const uint8_t* p, int64_t stride) { return spread2(halves2(p, stride)); }
inline __m512 scales1(const uint8_t* p) { return _mm512_set1_ps(fp16_to_f32(load_u16(p))); }

inline __m512i low_nibbles(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0f)); }
inline __m512i high_nibbles(__m512i v) {
  return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0f));
}
inline __m512i offset_bytes(__m512i v) { return _mm512_xor_si512(v, _mm512_set1_epi8(char(0x80))); }
// Two blocks of 64 nibbles (16 + 16 bytes at qs and qs + stride; element i of a block in byte
// i % 32, low nibble for i < 32) as a step's two vectors: a = elements 0-15 of each activation
// block, b = 16-31. The loads are [B0 q0:16, B0 q16:32, B1 q0:16, B1 q16:32]; 128-bit lanes 1 and 3
// take the high nibbles.
inline void group64_nibbles(const uint8_t* qs, int64_t stride, __m512i* a, __m512i* b) {
  const __m512i y = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)qs)),
                                       _mm256_loadu_si256((const __m256i*)(qs + stride)), 1);
  const __m512i shift = _mm512_setr_epi64(0, 0, 0x0004000400040004, 0x0004000400040004, 0, 0, 0x0004000400040004,
                                          0x0004000400040004);
  *a = low_nibbles(_mm512_srlv_epi16(_mm512_shuffle_i64x2(y, y, _MM_SHUFFLE(2, 2, 0, 0)), shift));
  *b = low_nibbles(_mm512_srlv_epi16(_mm512_shuffle_i64x2(y, y, _MM_SHUFFLE(3, 3, 1, 1)), shift));
}

// Byte shuffles (vpermt2b) gather a step's bytes from a window of two 64-byte loads, at offsets 0
// and `second` from the step's start: window byte b is index b (< 64) or 64 + b - second.
struct ByteIndex {
  alignas(64) uint8_t b[64];
};
constexpr uint8_t window_index(int b, int second) { return uint8_t(b < 64 ? b : 64 + b - second); }

// The 64 bytes of a Q8_0-like quad (4 blocks of `block` bytes, 16 wanted bytes per block starting
// at `first` within the block), block after block.
constexpr ByteIndex quad_bytes(int block, int first, int window_start, int second) {
  ByteIndex index{};
  for (int i = 0; i < 64; ++i) index.b[i] = window_index(block * (i / 16) + first + i % 16 - window_start, second);
  return index;
}
// 16 F16 values: lanes 4j .. 4j + 3 take the F16 at byte `field` of block j.
constexpr ByteIndex quad_halves(int block, int field, int second) {
  ByteIndex index{};
  for (int i = 0; i < 32; ++i) index.b[i] = window_index(block * (i / 8) + field + i % 2, second);
  return index;
}
inline __m512i shuffle_window(const ByteIndex& index, __m512i first, __m512i second) {
  return _mm512_permutex2var_epi8(first, _mm512_load_si512(index.b), second);
}
// The same for indices that all point into the first load (one vpermb: half the cost of vpermt2b).
inline __m512i shuffle_first(const ByteIndex& index, __m512i first) {
  return _mm512_permutexvar_epi8(_mm512_load_si512(index.b), first);
}
inline __m512 halves_to_f32(__m512i bytes) { return _mm512_cvtph_ps(_mm512_castsi512_si256(bytes)); }

// Zero-masked load of the bytes of [p, p + 64) that lie before p + valid.
inline __m512i load_upto(const uint8_t* p, int64_t valid) {
  return _mm512_maskz_loadu_epi8(first_lanes64(valid < 0 ? 0 : valid), p);
}

// Q8_0: blocks of 34 bytes (F16 d, 32 int8); levels q + 128. A quad is 136 bytes: the blocks'
// qs come from four 32-byte loads, regrouped by 128-bit lanes into elements 0-15 and 16-31 of each
// block (two vinserti64x4 and two vshufi64x2 cost less than two vpermt2b), and the four d from
// the window [0, 128).
struct Q8_0Decoder {
  static constexpr int64_t kHeader = 0, kBlockElements = 32, kBlockBytes = 34;
  static constexpr int C = 128;
  static constexpr bool kAsym = false, kBlockScale = true, kRowScale = false;
  static constexpr ByteIndex kScales = quad_halves(34, 0, 64);
  static WeightStep decode_loaded(__m256i q0, __m256i q1, __m256i q2, __m256i q3, __m512i w0, __m512i w64) {
    const __m512i y01 = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
    const __m512i y23 = _mm512_inserti64x4(_mm512_castsi256_si512(q2), q3, 1);
    return {offset_bytes(_mm512_shuffle_i64x2(y01, y23, _MM_SHUFFLE(2, 0, 2, 0))),
            offset_bytes(_mm512_shuffle_i64x2(y01, y23, _MM_SHUFFLE(3, 1, 3, 1))),
            halves_to_f32(shuffle_window(kScales, w0, w64)), _mm512_setzero_ps()};
  }
  static __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static __m256i load32_upto(const uint8_t* p, int64_t valid) {
    return _mm256_maskz_loadu_epi8(__mmask32(first_lanes64(valid < 0 ? 0 : valid)), p);
  }
  static WeightStep decode(const uint8_t* data, int64_t s) {
    const uint8_t* p = data + s * 4 * kBlockBytes;
    prefetch_ahead(p, 384);
    return decode_loaded(load32(p + 2), load32(p + 36), load32(p + 70), load32(p + 104), _mm512_loadu_si512(p),
                         _mm512_loadu_si512(p + 64));
  }
  static WeightStep decode_tail(const uint8_t* p, int64_t valid) {
    return decode_loaded(load32_upto(p + 2, valid - 2), load32_upto(p + 36, valid - 36),
                         load32_upto(p + 70, valid - 70), load32_upto(p + 104, valid - 104), load_upto(p, valid),
                         load_upto(p + 64, valid - 64));
  }
};

// Blocks of 32 with 4-bit nibbles: F16 d [, F16 m] [, 32-bit qh], 16 bytes whose low nibbles are
// elements 0-15 and high nibbles 16-31; qh (Q5_0, Q5_1) adds bit j of qh as the fifth bit (16)
// of element j. Levels are the unsigned values; symmetric formats mean level - C (C = 8 or 16),
// which their activations carry. Instances: Q4_0 and INT4_SYM_G32 (same bytes), Q4_1 and
// INT4_ASYM_G32 (same bytes), Q5_0, Q5_1. A quad (4 blocks) is the window [0, 64) + [second, 4B).
template <int kBlock, int kQsAt, int kQhAt, bool kAsymmetric, int kC>
struct G32Decoder {
  static constexpr int64_t kHeader = 0, kBlockElements = 32, kBlockBytes = kBlock;
  static constexpr int kSecond = 4 * kBlock - 64;
  static constexpr int C = kC;
  static constexpr bool kAsym = kAsymmetric, kBlockScale = true, kRowScale = false;
  // Whether the four blocks' d (and m) lie in the first 64 bytes: one vpermb, not a vpermt2b.
  static constexpr bool kScalesInFirst = 3 * kBlock + (kAsymmetric ? 4 : 2) <= 64;
  static constexpr ByteIndex kQs = quad_bytes(kBlock, kQsAt, 0, kSecond);
  static constexpr ByteIndex kScales = quad_halves(kBlock, 0, kSecond);
  static constexpr ByteIndex kMins = quad_halves(kBlock, 2, kSecond);
  static __m512 halves(const ByteIndex& index, __m512i first, __m512i second) {
    return halves_to_f32(kScalesInFirst ? shuffle_first(index, first) : shuffle_window(index, first, second));
  }
  static WeightStep decode_loaded(const uint8_t* p, __m512i first, __m512i second) {
    const __m512i qs = shuffle_window(kQs, first, second);
    WeightStep w{low_nibbles(qs), high_nibbles(qs), halves(kScales, first, second), _mm512_setzero_ps()};
    if constexpr (kAsymmetric) w.min = halves(kMins, first, second);
    if constexpr (kQhAt >= 0) {
      // Byte 16j + i of the first vector is element i of block j (fifth bit: bit i of its qh),
      // of the second vector element 16 + i (bit 16 + i).
      uint64_t low = 0, high = 0;
      for (int j = 0; j < 4; ++j) {
        uint32_t qh;
        std::memcpy(&qh, p + j * kBlock + kQhAt, 4);
        low |= uint64_t(qh & 0xffffu) << (16 * j);
        high |= uint64_t(qh >> 16) << (16 * j);
      }
      const __m512i sixteen = _mm512_set1_epi8(16);
      w.a = _mm512_mask_add_epi8(w.a, __mmask64(low), w.a, sixteen);
      w.b = _mm512_mask_add_epi8(w.b, __mmask64(high), w.b, sixteen);
    }
    return w;
  }
  static WeightStep decode(const uint8_t* data, int64_t s) {
    const uint8_t* p = data + s * 4 * kBlockBytes;
    prefetch_ahead(p, 256);
    return decode_loaded(p, _mm512_loadu_si512(p), _mm512_loadu_si512(p + kSecond));
  }
  static WeightStep decode_tail(const uint8_t* p, int64_t valid) {
    if constexpr (kQhAt >= 0) {
      // qh is read with scalar loads: decode a zero-padded copy of the partial quad instead.
      alignas(64) uint8_t quad[4 * kBlock] = {};
      std::memcpy(quad, p, size_t(valid));
      return decode(quad, 0);
    } else {
      return decode_loaded(p, load_upto(p, valid), load_upto(p + kSecond, valid - kSecond));
    }
  }
};
using Q4_0Decoder = G32Decoder<18, 2, -1, false, 8>;
using Q4_1Decoder = G32Decoder<20, 4, -1, true, 0>;
using Q5_0Decoder = G32Decoder<22, 6, 2, false, 16>;
using Q5_1Decoder = G32Decoder<24, 8, 4, true, 0>;

// IQ4_NL: Q4_0's bytes, each nibble an index into llama.cpp's 16 non-linear levels (kIQ4Levels,
// -127 .. 113), stored + 128 (1 .. 241, unsigned for dpbusd; C = 128 in the activations'
// correction): Q4_0's decoding, then one vpshufb per vector (the table in every 128-bit lane).
struct Iq4NlDecoder : G32Decoder<18, 2, -1, false, 128> {
  using Base = G32Decoder<18, 2, -1, false, 128>;
  static constexpr ByteIndex kLevels = [] {
    ByteIndex table{};
    for (int i = 0; i < 64; ++i) table.b[i] = uint8_t(int(quant::kIQ4Levels[i % 16]) + 128);
    return table;
  }();
  static WeightStep levels(WeightStep w) {
    const __m512i table = _mm512_load_si512(kLevels.b);
    w.a = _mm512_shuffle_epi8(table, w.a);
    w.b = _mm512_shuffle_epi8(table, w.b);
    return w;
  }
  static WeightStep decode(const uint8_t* data, int64_t s) { return levels(Base::decode(data, s)); }
  // Past a partial quad the scales are 0, so whatever the padding's nibbles look up adds nothing.
  static WeightStep decode_tail(const uint8_t* p, int64_t valid) { return levels(Base::decode_tail(p, valid)); }
};

// MXFP4: blocks of 17 bytes (an E8M0 exponent e, then Q4_0's 16 bytes of nibbles), each nibble an
// E2M1 code whose doubled level (kMXFP4Levels, -12 .. 12) is stored + 128 (C = 128): the nibbles
// gathered as Q4_0's (from byte 1 of each block), one vpshufb to the levels, and each block's
// scale 2^(e - 128) (the halving undone) as F32 bits, in vector form what quant::mxfp4_scale_bits
// computes: (e - 1) << 23, or 0x00200000 << e for e < 2 (the subnormals). Past a partial quad the
// bytes are zero: levels 0 and a finite scale, against activations that are zero there too.
struct Mxfp4Decoder {
  static constexpr int kBlock = 17, kSecond = 4 * kBlock - 64;
  static constexpr int64_t kHeader = 0, kBlockElements = 32, kBlockBytes = kBlock;
  static constexpr int C = 128;
  static constexpr bool kAsym = false, kBlockScale = true, kRowScale = false;
  static constexpr ByteIndex kQs = quad_bytes(kBlock, 1, 0, kSecond);
  // Byte 4L of lane L (lanes 4j .. 4j + 3: block j) takes block j's exponent byte.
  static constexpr ByteIndex kExponents = [] {
    ByteIndex index{};
    for (int i = 0; i < 64; ++i) index.b[i] = window_index(kBlock * (i / 16), kSecond);
    return index;
  }();
  static constexpr ByteIndex kLevels = [] {
    ByteIndex table{};
    for (int i = 0; i < 64; ++i) table.b[i] = uint8_t(int(quant::kMXFP4Levels[i % 16]) + 128);
    return table;
  }();
  static WeightStep decode_loaded(__m512i first, __m512i second) {
    const __m512i qs = shuffle_window(kQs, first, second);
    const __m512i table = _mm512_load_si512(kLevels.b);
    WeightStep w{_mm512_shuffle_epi8(table, low_nibbles(qs)), _mm512_shuffle_epi8(table, high_nibbles(qs)),
                 _mm512_setzero_ps(), _mm512_setzero_ps()};
    const __m512i e = _mm512_and_si512(shuffle_window(kExponents, first, second), _mm512_set1_epi32(0xff));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    w.scale = _mm512_castsi512_ps(
        _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), normal, subnormal));
    return w;
  }
  static WeightStep decode(const uint8_t* data, int64_t s) {
    const uint8_t* p = data + s * 4 * kBlockBytes;
    prefetch_ahead(p, 256);
    return decode_loaded(_mm512_loadu_si512(p), _mm512_loadu_si512(p + kSecond));
  }
  static WeightStep decode_tail(const uint8_t* p, int64_t valid) {
    return decode_loaded(load_upto(p, valid), load_upto(p + kSecond, valid - kSecond));
  }
};

// INT8_PC: an F32 row scale, then int8 values; levels q + 128; the row scale is applied at the end.
struct Int8PcDecoder {
  static constexpr int64_t kHeader = quant::kPerChannelHeaderBytes, kBlockElements = 1, kBlockBytes = 1;
  static constexpr int C = 128;
  static constexpr bool kAsym = false, kBlockScale = false, kRowScale = true;
  static WeightStep decode(const uint8_t* data, int64_t s) {
    const uint8_t* p = data + s * 128;
    prefetch_ahead(p, 384);
    return decode_loaded(_mm512_loadu_si512(p), _mm512_loadu_si512(p + 64));
  }
  static WeightStep decode_tail(const uint8_t* p, int64_t valid) {
    return decode_loaded(load_upto(p, valid), load_upto(p + 64, valid - 64));
  }
  static WeightStep decode_loaded(__m512i l0, __m512i l1) {
    return {offset_bytes(_mm512_shuffle_i64x2(l0, l1, _MM_SHUFFLE(2, 0, 2, 0))),
            offset_bytes(_mm512_shuffle_i64x2(l0, l1, _MM_SHUFFLE(3, 1, 3, 1))), _mm512_setzero_ps(),
            _mm512_setzero_ps()};
  }
};

// INT4_ZP_G32: Q4_1's bytes with the scale word in place of d and m. Lanes 4j .. 4j + 3 belong to
// block j of the quad; blocks past a partial quad's end (valid bytes) get scale 0.
struct Int4Zp32Decoder : Q4_1Decoder {
  static void scales_from_words(const uint8_t* p, int64_t valid, WeightStep* w) {
    alignas(16) float scale[4] = {}, min[4] = {};
    for (int j = 0; j < 4 && j * kBlock + 4 <= valid; ++j) std::tie(scale[j], min[j]) = quant::zp_scale_and_min(p + j * kBlock);
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    w->scale = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_load_ps(scale)));
    w->min = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_load_ps(min)));
  }
  static constexpr int kBlock = 20;
  static WeightStep decode(const uint8_t* data, int64_t s) {
    WeightStep w = Q4_1Decoder::decode(data, s);
    scales_from_words(data + s * 4 * kBlock, 4 * kBlock, &w);
    return w;
  }
  static WeightStep decode_tail(const uint8_t* p, int64_t valid) {
    WeightStep w = Q4_1Decoder::decode_tail(p, valid);
    scales_from_words(p, valid, &w);
    return w;
  }
};

// How an INT4 group's header reads: Sym (F16 d; levels - 8), Asym (F16 d, F16 m), ZeroPoint (INT4_ZP).
enum class Int4Header { Sym, Asym, ZeroPoint };

// INT4 groups of G = 64 or 128, laid out as the G = 32 ones above.
template <int G, Int4Header kHeaderKind>
struct Int4Decoder {
  static constexpr bool kAsymmetric = kHeaderKind != Int4Header::Sym;
  static constexpr int64_t kQs = kAsymmetric ? 4 : 2;
  static constexpr int64_t kHeader = 0, kBlockElements = G, kBlockBytes = kQs + G / 2;
  static constexpr int C = kAsymmetric ? 0 : 8;
  static constexpr bool kAsym = kAsymmetric, kBlockScale = true, kRowScale = false;
  static WeightStep decode(const uint8_t* data, int64_t s) {
    const uint8_t* p = data + s * (128 / G) * kBlockBytes;
    prefetch_ahead(p, 256);
    WeightStep w;
    if constexpr (G == 64) {
      group64_nibbles(p + kQs, kBlockBytes, &w.a, &w.b);
      if constexpr (kHeaderKind == Int4Header::ZeroPoint) {
        const auto [s0, m0] = quant::zp_scale_and_min(p);
        const auto [s1, m1] = quant::zp_scale_and_min(p + kBlockBytes);
        w.scale = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(s0), _mm512_set1_ps(s1));
        w.min = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(m0), _mm512_set1_ps(m1));
        return w;
      }
      w.scale = scales2(p, kBlockBytes);
      if constexpr (kAsymmetric) w.min = scales2(p + 2, kBlockBytes);
    } else {
      static_assert(G == 128);
      // q0:16 and q32:48 (low nibbles: elements 0-15, 32-47; high: 64-79, 96-111), then the rest.
      const __m512i y = _mm512_loadu_si512(p + kQs);
      const __m512i shift = _mm512_setr_epi64(0, 0, 0, 0, 0x0004000400040004, 0x0004000400040004,
                                              0x0004000400040004, 0x0004000400040004);
      w.a = low_nibbles(_mm512_srlv_epi16(_mm512_shuffle_i64x2(y, y, _MM_SHUFFLE(2, 0, 2, 0)), shift));
      w.b = low_nibbles(_mm512_srlv_epi16(_mm512_shuffle_i64x2(y, y, _MM_SHUFFLE(3, 1, 3, 1)), shift));
      if constexpr (kHeaderKind == Int4Header::ZeroPoint) {
        const auto [scale, min] = quant::zp_scale_and_min(p);
        w.scale = _mm512_set1_ps(scale);
        w.min = _mm512_set1_ps(min);
        return w;
      }
      w.scale = scales1(p);
      if constexpr (kAsymmetric) w.min = scales1(p + 2);
    }
    if constexpr (!kAsymmetric) w.min = _mm512_setzero_ps();
    return w;
  }
};

// INT3 / INT2 asymmetric groups of G = 64 or 128 (quant/blocks.h; the AVX2 decoder in
// kernels_q8_avx2.cpp explains the planes). A step (128 values = activation blocks 0-3) wants
// a = values 0-15 of each activation block, b = values 16-31: one 64-bit shift per qword and a
// mask on broadcast plane bytes.
template <int G, int Bits>
struct IntLowBitDecoder {
  static constexpr int64_t kQs = 4, kQh = kQs + G / 4;
  static constexpr int64_t kHeader = 0, kBlockElements = G, kBlockBytes = kQs + G * Bits / 8;
  static constexpr int C = 0;
  static constexpr bool kAsym = true, kBlockScale = true, kRowScale = false;
  static __m512i bits(__m512i source, __m512i shift, int mask) {
    return _mm512_and_si512(_mm512_srlv_epi64(source, shift), _mm512_set1_epi8(char(mask)));
  }
  static __m512i high_bit(__m512i source, __m512i shift) { return _mm512_slli_epi16(bits(source, shift, 1), 2); }
  static WeightStep decode(const uint8_t* data, int64_t s) {
    const uint8_t* p = data + s * (128 / G) * kBlockBytes;
    prefetch_ahead(p, 256);
    WeightStep w;
    if constexpr (G == 64) {
      // Blocks B0 (activation blocks 0, 1) and B1 (2, 3): lanes 0-1 read B0's 16 crumb bytes, lanes
      // 2-3 B1's; values 0-15 / 32-47 of a block at shifts 0 / 4, 16-31 / 48-63 at 2 / 6. High bits:
      // values 8c .. 8c + 7 of a block at bit c of its 8 plane bytes.
      const __m512i qs = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)(p + kQs)))),
          _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)(p + kBlockBytes + kQs))), 1);
      w.a = bits(qs, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4), 3);
      w.b = bits(qs, _mm512_setr_epi64(2, 2, 6, 6, 2, 2, 6, 6), 3);
      if constexpr (Bits == 3) {
        int64_t plane0, plane1;
        std::memcpy(&plane0, p + kQh, 8);
        std::memcpy(&plane1, p + kBlockBytes + kQh, 8);
        const __m512i qh = _mm512_mask_set1_epi64(_mm512_set1_epi64(plane0), 0xf0, plane1);
        w.a = _mm512_or_si512(w.a, high_bit(qh, _mm512_setr_epi64(0, 1, 4, 5, 0, 1, 4, 5)));
        w.b = _mm512_or_si512(w.b, high_bit(qh, _mm512_setr_epi64(2, 3, 6, 7, 2, 3, 6, 7)));
      }
      w.scale = scales2(p, kBlockBytes);
      w.min = scales2(p + 2, kBlockBytes);
    } else {
      static_assert(G == 128);
      // One block: activation block j is crumb j (shift 2j) of the 32 crumb bytes, bytes 0-15 for
      // a and 16-31 for b; its high bits are bits 2j (a) and 2j + 1 (b) of the 16 plane bytes.
      const __m512i shift = _mm512_setr_epi64(0, 0, 2, 2, 4, 4, 6, 6);
      w.a = bits(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)(p + kQs))), shift, 3);
      w.b = bits(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)(p + kQs + 16))), shift, 3);
      if constexpr (Bits == 3) {
        const __m512i qh = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)(p + kQh)));
        w.a = _mm512_or_si512(w.a, high_bit(qh, shift));
        w.b = _mm512_or_si512(w.b, high_bit(qh, _mm512_add_epi64(shift, _mm512_set1_epi64(1))));
      }
      w.scale = scales1(p);
      w.min = scales1(p + 2);
    }
    return w;
  }
};

template <class D>
struct QuadKernel {
  using Layout = Q8Layout<4, D::kAsym>;
  // Prefill: 8 rows x 2 tokens, each 8-row tile decoded once per 16-step chunk into an L1 buffer
  // (kernels_tile.h) and run over a whole block of tokens: 4 x 5 unpacked tiles re-decoded the
  // weights for every 5 tokens and re-read the activations for every 4 rows (168 -> ~215 GFLOP/s
  // for Q8_0, one thread, n = 512).
  static constexpr int kRows = 8, kTokens = 2, kDecodeRows = 4;
  static constexpr int64_t kPackSteps = 16;
  static constexpr int64_t kStepBytes = 128 / D::kBlockElements * D::kBlockBytes;
  using Acc = __m512;
  using W = WeightStep;
  struct A {
    __m512i qa, qb, corr;
    __m512 da, s;
  };
  static int64_t steps(int64_t k) { return (k + 127) / 128; }
  static int64_t direct_steps(int64_t k) { return k / 128; }
  static Acc zero() { return _mm512_setzero_ps(); }
  static W load_w(const uint8_t* row, int64_t s) { return D::decode(row + D::kHeader, s); }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t k) {
    // The row's last blocks; what lies past them decodes to zero scales, so the padding adds 0.
    const uint8_t* p = row + D::kHeader + s * kStepBytes;
    const int64_t valid = (k - s * 128) / D::kBlockElements * D::kBlockBytes;
    if constexpr (requires { D::decode_tail(p, valid); }) {
      return D::decode_tail(p, valid);
    } else {
      alignas(64) uint8_t step[kStepBytes] = {};
      std::memcpy(step, p, size_t(valid));
      return D::decode(step, 0);
    }
  }
  static A load_a(const uint8_t* act, int64_t s) {
    const uint8_t* g = act + s * Layout::kGroupBytes;
    A a;
    a.qa = _mm512_loadu_si512(g + Layout::kQsA);
    a.qb = _mm512_loadu_si512(g + Layout::kQsB);
    a.corr = _mm512_loadu_si512(g + Layout::kCorr);
    a.da = _mm512_loadu_ps(g + Layout::kScale);
    if constexpr (D::kAsym) {
      a.s = _mm512_loadu_ps(g + Layout::kSum);
    } else {
      a.s = _mm512_setzero_ps();
    }
    return a;
  }
  static void mac(Acc& acc, const W& w, const A& a) {
    __m512i dot = _mm512_dpbusd_epi32(a.corr, w.a, a.qa);
    dot = _mm512_dpbusd_epi32(dot, w.b, a.qb);
    const __m512 scale = D::kBlockScale ? _mm512_mul_ps(w.scale, a.da) : a.da;
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc);
    if constexpr (D::kAsym) acc = _mm512_fmadd_ps(w.min, a.s, acc);
  }
  static float finish(Acc acc, const uint8_t* row) {
    const float sum = hsum(acc);
    return D::kRowScale ? sum * load_f32(row) : sum;
  }
};

// NF4 (quant/blocks.h): blocks of 64 (34 bytes: F16 d, 32 bytes of nibbles, element i in byte
// i % 32, low nibble for i < 32: INT4_SYM_G64's bytes), two blocks a step (group64_nibbles).
// The int16 levels (code * 16256) split exactly into 128 * hi + lo (int8 hi, |lo| <= 64); the
// kernel looks up two unsigned planes, hi + 128 and lo + 64, and with corr = -128 x (the lane's
// activation sum) its int32 lanes are
//   128 * (corr + dpbusd(hi planes)) + (corr / 2 + dpbusd(lo planes))   = the exact sum of level x q
// (at most 8 x 127 x 127 x 128 + 8 x 64 x 127 in magnitude), scaled by (d / 16256) x d_a as the
// reference and the AVX2 kernel scale them.
// NF4's hi + 128 (high) or lo + 64 plane for each nibble, in every 128-bit lane.
constexpr ByteIndex nf4_plane(bool high) {
  ByteIndex t{};
  for (int i = 0; i < 64; ++i) {
    t.b[i] = high ? uint8_t(quant::nf4_level_high(i % 16) + 128) : uint8_t(quant::nf4_level_low(i % 16) + 64);
  }
  return t;
}
struct Nf4QuadKernel {
  using Layout = Q8Layout<4, false>;
  static constexpr int kRows = 8, kTokens = 2, kDecodeRows = 4;
  // A decoded step is five vectors (320 bytes): 8 rows x 8 steps keep the pack at 20 KB of L1.
  static constexpr int64_t kPackSteps = 8;
  static constexpr int64_t kBlockBytes = 34, kStepBytes = 2 * kBlockBytes;
  static constexpr int C = 128;
  using Acc = __m512;
  using A = QuadKernel<Iq4NlDecoder>::A;
  struct W {
    __m512i high_a, high_b, low_a, low_b;
    __m512 scale;  // each lane's block d / 16256
  };
  static constexpr ByteIndex kHigh = nf4_plane(true), kLow = nf4_plane(false);
  static int64_t steps(int64_t k) { return (k + 127) / 128; }
  static int64_t direct_steps(int64_t k) { return k / 128; }
  static Acc zero() { return _mm512_setzero_ps(); }
  static W decode(const uint8_t* p) {
    __m512i ia, ib;
    group64_nibbles(p + 2, kBlockBytes, &ia, &ib);
    const __m512i high = _mm512_load_si512(kHigh.b), low = _mm512_load_si512(kLow.b);
    // d / 16256 per block, as the reference scales (one 4-lane division per step).
    const __m128 d = _mm_div_ps(halves2(p, kBlockBytes), _mm_set1_ps(float(quant::kNF4LevelScale)));
    return {_mm512_shuffle_epi8(high, ia), _mm512_shuffle_epi8(high, ib), _mm512_shuffle_epi8(low, ia),
            _mm512_shuffle_epi8(low, ib), spread2(d)};
  }
  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kStepBytes;
    prefetch_ahead(p, 256);
    return decode(p);
  }
  static W load_w_tail(const uint8_t* row, int64_t s, int64_t k) {
    // One block left (k is a multiple of 64): the second decodes from zeros with d = 0.
    alignas(64) uint8_t step[kStepBytes] = {};
    std::memcpy(step, row + s * kStepBytes, size_t((k - s * 128) / 64 * kBlockBytes));
    return decode(step);
  }
  static A load_a(const uint8_t* act, int64_t s) { return QuadKernel<Iq4NlDecoder>::load_a(act, s); }
  static void mac(Acc& acc, const W& w, const A& a) {
    __m512i high = _mm512_dpbusd_epi32(a.corr, w.high_a, a.qa);
    high = _mm512_dpbusd_epi32(high, w.high_b, a.qb);
    __m512i low = _mm512_dpbusd_epi32(_mm512_srai_epi32(a.corr, 1), w.low_a, a.qa);
    low = _mm512_dpbusd_epi32(low, w.low_b, a.qb);
    const __m512i lanes = _mm512_add_epi32(_mm512_slli_epi32(high, 7), low);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), _mm512_mul_ps(w.scale, a.da), acc);
  }
  static float finish(Acc acc, const uint8_t*) { return hsum(acc); }
};

template <class D>
constexpr FormatKernels make_kernels(DType type) {
  return {type, Q8Layout<4, D::kAsym>::row_bytes, convert_q8_groups<4, D::kAsym, D::C>,
          matmul_tile<QuadKernel<D>>};
}

constexpr FormatKernels kQ8_0 = make_kernels<Q8_0Decoder>(DType::Q8_0);
constexpr FormatKernels kQ4_0 = make_kernels<Q4_0Decoder>(DType::Q4_0);
constexpr FormatKernels kQ4_1 = make_kernels<Q4_1Decoder>(DType::Q4_1);
constexpr FormatKernels kQ5_0 = make_kernels<Q5_0Decoder>(DType::Q5_0);
constexpr FormatKernels kQ5_1 = make_kernels<Q5_1Decoder>(DType::Q5_1);
constexpr FormatKernels kIq4Nl = make_kernels<Iq4NlDecoder>(DType::IQ4_NL);
constexpr FormatKernels kMxfp4 = make_kernels<Mxfp4Decoder>(DType::MXFP4);
constexpr FormatKernels kNf4{DType::NF4, Q8Layout<4, false>::row_bytes, convert_q8_groups<4, false, Nf4QuadKernel::C>,
                             matmul_tile<Nf4QuadKernel>};
constexpr FormatKernels kInt8Pc = make_kernels<Int8PcDecoder>(DType::INT8_PC);
constexpr FormatKernels kInt4Sym32 = make_kernels<Q4_0Decoder>(DType::INT4_SYM_G32);
using H = Int4Header;
constexpr FormatKernels kInt4Sym64 = make_kernels<Int4Decoder<64, H::Sym>>(DType::INT4_SYM_G64);
constexpr FormatKernels kInt4Sym128 = make_kernels<Int4Decoder<128, H::Sym>>(DType::INT4_SYM_G128);
constexpr FormatKernels kInt4Asym32 = make_kernels<Q4_1Decoder>(DType::INT4_ASYM_G32);
constexpr FormatKernels kInt4Asym64 = make_kernels<Int4Decoder<64, H::Asym>>(DType::INT4_ASYM_G64);
constexpr FormatKernels kInt4Asym128 = make_kernels<Int4Decoder<128, H::Asym>>(DType::INT4_ASYM_G128);
constexpr FormatKernels kInt4Zp32 = make_kernels<Int4Zp32Decoder>(DType::INT4_ZP_G32);
constexpr FormatKernels kInt4Zp64 = make_kernels<Int4Decoder<64, H::ZeroPoint>>(DType::INT4_ZP_G64);
constexpr FormatKernels kInt4Zp128 = make_kernels<Int4Decoder<128, H::ZeroPoint>>(DType::INT4_ZP_G128);
constexpr FormatKernels kInt3Asym64 = make_kernels<IntLowBitDecoder<64, 3>>(DType::INT3_ASYM_G64);
constexpr FormatKernels kInt3Asym128 = make_kernels<IntLowBitDecoder<128, 3>>(DType::INT3_ASYM_G128);
constexpr FormatKernels kInt2Asym64 = make_kernels<IntLowBitDecoder<64, 2>>(DType::INT2_ASYM_G64);
constexpr FormatKernels kInt2Asym128 = make_kernels<IntLowBitDecoder<128, 2>>(DType::INT2_ASYM_G128);

}  // namespace

const FormatKernels* avx512_q8_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::Q8_0: return &kQ8_0;
    case DType::Q4_0: return &kQ4_0;
    case DType::Q4_1: return &kQ4_1;
    case DType::Q5_0: return &kQ5_0;
    case DType::Q5_1: return &kQ5_1;
    case DType::IQ4_NL: return &kIq4Nl;
    case DType::MXFP4: return &kMxfp4;
    case DType::NF4: return &kNf4;
    case DType::INT8_PC: return &kInt8Pc;
    case DType::INT4_SYM_G32: return &kInt4Sym32;
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
