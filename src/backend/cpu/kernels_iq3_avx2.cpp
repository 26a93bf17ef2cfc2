// AVX2 kernels for llama.cpp's 3-bit grid formats IQ3_XXS and IQ3_S (quant/blocks.h) against
// Q8_K activations, run as Layouts of the 16-group symmetric kernel of kernels_kquant16_avx2.h (the
// one Q6_K and Q3_K use, prefill tiles included), whose levels must stay <= 63. A grid entry is 4
// unsigned bytes: IQ3_S's from {1, 3, ..., 15}, used as they are (value d (2 s + 1) sign g);
// IQ3_XXS's from {4, 12, ..., 62}, all even, so its value d / 4 (2 s + 1) sign g is taken as
// d / 2 (2 s + 1) sign g / 2 with g / 2 <= 31 (halved bytes and doubled d: exact). Per 32-value
// sub-block:
//   magnitudes  8 grid entries: IQ3_XXS's looked up one by one (scalar loads), IQ3_S's gathered
//               (see Iq3SLayout::magnitudes);
//   signs       +-1 per byte: IQ3_XXS from an 8-byte table per 7-bit sign index (its parity bit
//               included), IQ3_S by spreading its 32 sign bits over the bytes;
//   levels      sign x g (IQ3_XXS: g / 2) + 32, unsigned (1 .. 63): the kernel's offset 32;
//   scales      the sub-block's 2 s + 1 (<= 31) for both of its 16-value groups.
// And IQ3_S_L4, IQ3_S re-encoded at load as 4-bit levels (quant/iq3_levels.cpp), which needs no
// grid: the AVX2 table's compute encoding for IQ3_S (kernels.cpp).
#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_kquant16_avx2.h"
#include "backend/cpu/kernels_q8k_common.h"
#include "backend/cpu/kernels_simd_avx2.h"
#include "backend/cpu/kernels_tile.h"
#include "quant/blocks.h"
#include "quant/iq3_grids.h"

namespace kestrel::cpu {
namespace {

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// A grid with every byte halved (exact: the bytes are even).
template <int N>
struct HalvedGrid {
  uint32_t v[N];
};
template <int N>
constexpr HalvedGrid<N> halve(const uint32_t (&grid)[N]) {
  HalvedGrid<N> out{};
  for (int i = 0; i < N; ++i) out.v[i] = (grid[i] >> 1) & 0x7f7f7f7fu;
  return out;
}
constexpr HalvedGrid<256> kXxsGrid = halve(quant::kIQ3XXSGrid);

// kIQ3Signs expanded: 8 bytes of +1 / -1 per 7-bit index, as one little-endian uint64.
struct SignTable {
  uint64_t v[128];
};
constexpr SignTable kSigns = [] {
  SignTable table{};
  for (int i = 0; i < 128; ++i) {
    for (int b = 0; b < 8; ++b) {
      const uint64_t byte = (quant::kIQ3Signs[i] >> b & 1) != 0 ? 0xff : 0x01;
      table.v[i] |= byte << (8 * b);
    }
  }
  return table;
}();

// A sub-block's unsigned levels: sign x magnitude + 32.
inline __m256i offset_levels(__m256i magnitude, __m256i signs) {
  return _mm256_add_epi8(_mm256_sign_epi8(magnitude, signs), _mm256_set1_epi8(32));
}
// 8 sub-block scales 2 s + 1 (int8, sub-block j in byte j) as the 16 group scales.
inline __m128i group_scales(__m128i odd8) { return _mm_unpacklo_epi8(odd8, odd8); }

// IQ3_S's 8 scale codes (4 bytes, code j in nibble j % 2 of byte j / 2) as the 16 group scales.
inline __m128i iq3s_group_scales(const uint8_t* scales) {
  const uint32_t packed = load_u32(scales);
  const __m128i low = _mm_cvtsi32_si128(int(packed & 0x0f0f0f0fu));
  const __m128i high = _mm_cvtsi32_si128(int(packed >> 4 & 0x0f0f0f0fu));
  const __m128i codes = _mm_unpacklo_epi8(low, high);  // code j in byte j
  return group_scales(_mm_add_epi8(_mm_add_epi8(codes, codes), _mm_set1_epi8(1)));
}

// What the grid formats' Layouts (kernels_kquant16_avx2.h) share: offset 32, and the levels from
// L's grid magnitudes and signs.
template <class L>
struct Iq3GridLayout {
  static constexpr bool kHasMins = false;
  static constexpr int kOffsetShift = 5;  // offset 32
  static void levels_half(const uint8_t* p, int h, __m256i out[4]) {
    for (int q = 0; q < 4; ++q) out[q] = offset_levels(L::magnitudes(p, 4 * h + q), L::signs(p, 4 * h + q));
  }
};

// Sub-block j's 2 s + 1 (the even bytes of the 16 group scales) as int16 j, in both 128-bit lanes;
// subblock_scale broadcasts one of them to every int16 lane (a madd operand for sub-block j).
inline __m256i subblock_scales(__m128i group_scales_i8) {
  const __m128i even = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1);
  return _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_shuffle_epi8(group_scales_i8, even)));
}
inline __m256i subblock_scale(__m256i scales, int j) {
  return _mm256_shuffle_epi8(scales, _mm256_set1_epi16(int16_t(0x0100 + 0x0202 * j)));
}

// IQ3_S's decode (one token) takes the super-block's sum S without the offset, by the sign trick:
// maddubs(magnitude, sign(q_a, signs)) (pair sums <= 2 x 15 x 127), each sub-block's products madd
// with its scale: the same integer S as the levels' form, one operation less per sub-block and no
// bsums correction; measured faster for IQ3_S's decode, slower for IQ3_XXS's (docs/PERFORMANCE.md).
template <class L>
struct SignTrickDecode {
  static __m256i direct_lanes(const uint8_t* p, const KquantActivation& a) {
    const __m256i scales = subblock_scales(L::scales_i8(p));
    __m256i lanes = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i products = _mm256_maddubs_epi16(L::magnitudes(p, j), _mm256_sign_epi8(a.q(j), L::signs(p, j)));
      lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(products, subblock_scale(scales, j)));
    }
    return lanes;
  }
};

// IQ3_XXS: d, qs[64] (8-bit indices), 8 little-endian words (4 x 7 sign bits, 4-bit code).
struct Iq3XxsLayout : Iq3GridLayout<Iq3XxsLayout> {
  static constexpr int64_t kBlockBytes = 98;
  static float block_d(const uint8_t* p) { return fp16_to_f32(load_u16(p)) * 0.5f; }
  static __m128i scales_i8(const uint8_t* p) {
    const __m256i codes = _mm256_srli_epi32(load256(p + 66), 28);
    const __m256i odd = _mm256_add_epi32(_mm256_add_epi32(codes, codes), _mm256_set1_epi32(1));
    const __m128i odd16 = _mm_packs_epi32(_mm256_castsi256_si128(odd), _mm256_extracti128_si256(odd, 1));
    return group_scales(_mm_packs_epi16(odd16, odd16));
  }
  static __m256i magnitudes(const uint8_t* p, int j) {
    const uint8_t* q = p + 2 + 8 * j;
    const uint32_t* g = kXxsGrid.v;
    return _mm256_setr_epi32(int(g[q[0]]), int(g[q[1]]), int(g[q[2]]), int(g[q[3]]), int(g[q[4]]), int(g[q[5]]),
                             int(g[q[6]]), int(g[q[7]]));
  }
  static __m256i signs(const uint8_t* p, int j) {
    const uint32_t w = load_u32(p + 66 + 4 * j);
    return _mm256_setr_epi64x(int64_t(kSigns.v[w & 127]), int64_t(kSigns.v[w >> 7 & 127]),
                              int64_t(kSigns.v[w >> 14 & 127]), int64_t(kSigns.v[w >> 21 & 127]));
  }
};

// IQ3_S: d, qs[64] (low 8 index bits), qh[8] (bit 8), signs[32] (one bit per value), scales[4].
struct Iq3SLayout : Iq3GridLayout<Iq3SLayout>, SignTrickDecode<Iq3SLayout> {
  static constexpr int64_t kBlockBytes = 110;
  static float block_d(const uint8_t* p) { return fp16_to_f32(load_u16(p)); }
  static __m128i scales_i8(const uint8_t* p) { return iq3s_group_scales(p + 106); }
  // The 9-bit indices (qs | the qh bit) made in a vector and the 8 entries gathered: on a Zen 3
  // core 1.2x the decode of 8 scalar index computations and loads, prefill level
  // (docs/PERFORMANCE.md); IQ3_XXS's 8-bit indices stay scalar (its gather measured 0.75x).
  static __m256i magnitudes(const uint8_t* p, int j) {
    const __m256i low = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 2 + 8 * j)));
    const __m256i high = _mm256_and_si256(
        _mm256_sllv_epi32(_mm256_set1_epi32(p[66 + j]), _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1)), _mm256_set1_epi32(256));
    return _mm256_i32gather_epi32(reinterpret_cast<const int*>(quant::kIQ3SGrid), _mm256_or_si256(low, high), 4);
  }
  // Byte i takes bit i % 8 of sign byte i / 8: -1 where set, else +1.
  static __m256i signs(const uint8_t* p, int j) {
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int(load_u32(p + 74 + 4 * j))),
                                               _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202,
                                                                  0x0303030303030303));
    const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
    const __m256i negative = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_or_si256(negative, _mm256_set1_epi8(1));
  }
};

// IQ3_S_L4 (quant/blocks.h): IQ3_S's values as nibbles n, value 2 n - 15: for the prefill tiles
// levels 2 n + 17 (17 .. 47) for the kernel's offset 32, from one shift and mask (the nibble lands
// already doubled) and one add per vector; for one token the nibbles themselves (direct_lanes:
// 1.2x the decode of the levels' form, docs/PERFORMANCE.md); IQ3_S's scale codes and d as they
// are. No grid lookups: the integer sums and the float tail are IQ3_S's, so a re-encoded IQ3_S
// matrix gives bitwise the same results.
struct Iq3SL4Layout {
  static constexpr int64_t kBlockBytes = 134;
  static constexpr bool kHasMins = false;
  static constexpr int kOffsetShift = 5;  // offset 32
  static float block_d(const uint8_t* p) { return fp16_to_f32(load_u16(p)); }
  static __m128i scales_i8(const uint8_t* p) { return iq3s_group_scales(p + 2); }
  // One token's S straight from the nibbles: sum_j (2 s_j + 1) (2 n . a - 15 bsum_j), the offset
  // from the bsums once per super-block (the same integer S as the levels' form).
  static __m256i direct_lanes(const uint8_t* p, const KquantActivation& a) {
    const __m128i groups = scales_i8(p);
    const __m256i scales = subblock_scales(groups), low4 = _mm256_set1_epi8(0x0f);
    __m256i lanes = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {  // sub-block j: nibble j % 2 of qs[32 (j / 2) ..]
      const __m256i q = load256(p + 6 + 32 * (j / 2));
      const __m256i n = _mm256_and_si256(j % 2 == 0 ? q : _mm256_srli_epi16(q, 4), low4);
      lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(_mm256_maddubs_epi16(n, a.q(j)), subblock_scale(scales, j)));
    }
    // 15 x sum_g scale_g bsum_g, as (x << 4) - x.
    const __m256i offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(groups), a.bsums());
    return _mm256_sub_epi32(_mm256_add_epi32(lanes, lanes), _mm256_sub_epi32(_mm256_slli_epi32(offset, 4), offset));
  }
  static void levels_half(const uint8_t* p, int h, __m256i out[4]) {
    const __m256i doubled = _mm256_set1_epi8(0x1e), offset = _mm256_set1_epi8(17);
    for (int c = 0; c < 2; ++c) {
      const __m256i q = load256(p + 6 + 64 * h + 32 * c);
      out[2 * c] = _mm256_add_epi8(_mm256_and_si256(_mm256_slli_epi16(q, 1), doubled), offset);
      out[2 * c + 1] = _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi16(q, 3), doubled), offset);
    }
  }
};

constexpr FormatKernels kIq3Xxs{DType::IQ3_XXS, Q8KLayout::row_bytes, convert_q8_k,
                                interleaved_matmul<SymmetricKInterleave<Iq3XxsLayout>>};
// IQ3_S's decode is bound by its grid gathers, not memory: 4 row chunks per thread (a Zen 3 VM,
// 2 threads, alternated: 1.17x the decode of one chunk each; docs/PERFORMANCE.md).
constexpr FormatKernels kIq3S{DType::IQ3_S, Q8KLayout::row_bytes, convert_q8_k,
                              interleaved_matmul<SymmetricKInterleave<Iq3SLayout>>, 4};
constexpr FormatKernels kIq3SL4{DType::IQ3_S_L4, Q8KLayout::row_bytes, convert_q8_k,
                                interleaved_matmul<SymmetricKInterleave<Iq3SL4Layout>>};

}  // namespace

const FormatKernels* avx2_iq3_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::IQ3_XXS: return &kIq3Xxs;
    case DType::IQ3_S: return &kIq3S;
    case DType::IQ3_S_L4: return &kIq3SL4;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu
