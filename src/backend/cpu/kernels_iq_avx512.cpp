// AVX-512 kernels for llama.cpp's IQ formats IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S,
// IQ1_S and IQ1_M against Q8_K activations in the lane-major layout (kernels_lanes_avx512.h):
// each decoder produces four vectors of unsigned levels (the format's signed values plus an
// offset, so dpbusd takes them) and the lanes start from the activations' -offset * bsum_p:
//   IQ4_XS:     -128 * bsum_p     levels looked up + 128
//   IQ3_S:      -16 * bsum_p      signed grid values + 16
//   IQ3_XXS:    -64 * bsum_p      signed grid values + 64
//   IQ2_XXS/XS/S: -64 * bsum_p    signed grid values + 64
//   IQ1_S/M:    -9 * bsum_p       8 grid +- 1 (the delta) + 9

#include <array>

#include "backend/cpu/kernels_lanes_avx512.h"  // first: its target pragma covers this file
#include "backend/cpu/kernels_isa.h"
#include "backend/cpu/kernels_tile.h"
#include "quant/blocks.h"
#include "quant/iq3_grids.h"
#include "quant/iq_grids.h"

namespace kestrel::cpu {
namespace {

using namespace lanes_avx512;

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
// (sign_bytes) rather than looked up. Returns the codes 1 + 2 s_j, one byte each.
// Eight 7-bit ksigns_iq2xs indices packed in bits 0..55 -> their eight sign bytes (the index with
// bit 7 set where that makes the byte's parity even).
inline uint64_t sign_bytes(uint64_t packed) {
  const uint64_t bytes = _pdep_u64(packed, 0x7F7F7F7F7F7F7F7Full);
  uint64_t parity = bytes ^ (bytes >> 4);  // bit 0 of each byte ends as the byte's parity
  parity ^= parity >> 2;
  parity ^= parity >> 1;
  return bytes | (parity & 0x0101010101010101ull) << 7;
}

inline uint64_t xxs_signs(const uint8_t* words, int stride, uint64_t signs[4]) {
  uint64_t codes = 0;
  for (int u = 0; u < 4; ++u) {
    uint32_t packed[2];
    std::memcpy(&packed[0], words + 2 * u * stride, 4);
    std::memcpy(&packed[1], words + (2 * u + 1) * stride, 4);
    codes |= uint64_t(1 + 2 * (packed[0] >> 28)) << (16 * u) | uint64_t(1 + 2 * (packed[1] >> 28)) << (16 * u + 8);
    signs[u] = sign_bytes((packed[0] & 0x0FFFFFFFu) | uint64_t(packed[1] & 0x0FFFFFFFu) << 28);
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

// Index vectors of the grid formats whose 32 entries per super-block (8 values each: entry e =
// 4j + l is entry l of sub-block j) are unpacked as two int32 vectors (entries 0-15, 16-31).
constexpr DwordIndex iota_over(int divisor, int base) {  // lane i: base + i / divisor
  DwordIndex index{};
  for (int i = 0; i < 16; ++i) index.i[i] = base + i / divisor;
  return index;
}
constexpr DwordIndex shifts(int step, int period) {  // lane i: step * (i % period)
  DwordIndex index{};
  for (int i = 0; i < 16; ++i) index.i[i] = step * (i % period);
  return index;
}
// Vector v, lane p takes half v % 2 of entry 2p + v / 2 (kEntry[v / 2]).
constexpr DwordIndex entry_of_lane(int half) {
  DwordIndex index{};
  for (int p = 0; p < 16; ++p) index.i[p] = 2 * p + half;
  return index;
}
constexpr DwordIndex kEntry[2] = {entry_of_lane(0), entry_of_lane(1)};
constexpr DwordIndex kPairOf[2] = {iota_over(2, 0), iota_over(2, 8)};  // entry e -> byte e / 2
constexpr DwordIndex kQuadOf[2] = {iota_over(4, 0), iota_over(4, 4)};  // entry e -> sub-block e / 4

// The four level vectors of a grid format: vector v, lane p is half v % 2 of entry 2p + v / 2,
// gathered as one int32 from `grid` (8-byte entries viewed as int32 pairs; entry[h] holds 2 x
// the grid index of entries 16h ..), then offset - value where `negative` (a byte mask per
// vector) and offset + value elsewhere.
inline void gather_signed_levels(const __m512i (&entry)[2], const uint64_t* grid, int offset,
                                 const uint64_t signs[4], __m512i (&q)[4]) {
  const auto* grid32 = reinterpret_cast<const int*>(grid);
  const __m512i off = _mm512_set1_epi8(char(offset));
  for (int v = 0; v < 4; ++v) {
    const __m512i index = _mm512_add_epi32(_mm512_permutex2var_epi32(entry[0], _mm512_load_si512(kEntry[v / 2].i), entry[1]),
                                           _mm512_set1_epi32(v % 2));
    const __m512i values = _mm512_i32gather_epi32(index, grid32, 4);
    q[v] = _mm512_mask_sub_epi8(_mm512_add_epi8(values, off), negative_bytes(signs, v), off, values);
  }
}

// Group p's scale d / 8 (1 + 2 s) from IQ2_XS / IQ2_S's scale bytes (sub-block j: the low nibble
// for its first 16 values, the high one for the last 16).
inline __m512 nibble_scales(const uint8_t* scales, float d) {
  uint64_t bytes;
  std::memcpy(&bytes, scales, 8);
  const __m512i s = _mm512_and_si512(_mm512_srlv_epi32(per_group_bytes(bytes), odd_lane_shift(4)), _mm512_set1_epi32(15));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_add_epi32(s, s), _mm512_set1_epi32(1))),
                       _mm512_set1_ps(d * 0.125f));
}

// IQ2_XS: 74 bytes per super-block (F16 d, qs[32] uint16: a 9-bit index into kIQ2XSGrid and a
// 7-bit ksigns index per entry, scales[8]); IQ2_S: 82 bytes (F16 d, qs[32] low index bytes,
// signs[32] one byte per entry, qh[8]: bits 2l, 2l + 1 are index bits 8-9 of entry l of sub-block
// j, scales[8]). Values (8, 25, 43, signed) + 64, as IQ2_XXS.
template <bool kS>
struct Iq2Kernel : OffsetLanesKernel<Iq2Kernel<kS>> {
  using W = typename OffsetLanesKernel<Iq2Kernel<kS>>::W;
  static constexpr int64_t kBlockBytes = kS ? 82 : 74, kStepBytes = kBlockBytes;
  static constexpr DwordIndex kPairShift = shifts(2, 4);
  static W load_w(const uint8_t* row, int64_t s) {
    const uint8_t* p = row + s * kBlockBytes;
    W w;
    __m512i entry[2];
    uint64_t signs[4];
    if constexpr (kS) {
      std::memcpy(signs, p + 34, 32);
      const __m512i qh = _mm512_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 66)));
      for (int h = 0; h < 2; ++h) {
        const __m512i high = _mm512_and_si512(
            _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_load_si512(kQuadOf[h].i), qh), _mm512_load_si512(kPairShift.i)),
            _mm512_set1_epi32(3));
        const __m512i low = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 + 16 * h)));
        entry[h] = _mm512_slli_epi32(_mm512_or_si512(_mm512_slli_epi32(high, 8), low), 1);
      }
      w.scale = nibble_scales(p + 74, fp16_to_f32(load_u16(p)));
    } else {
      for (int u = 0; u < 4; ++u) {  // the 7-bit sign indices of entries 8u .. (bits 9-15 of each)
        uint64_t words[2];
        std::memcpy(words, p + 2 + 16 * u, 16);
        signs[u] = sign_bytes(_pext_u64(words[0], 0xFE00FE00FE00FE00ull) | _pext_u64(words[1], 0xFE00FE00FE00FE00ull) << 28);
      }
      for (int h = 0; h < 2; ++h) {
        const __m512i qs = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 + 32 * h)));
        entry[h] = _mm512_slli_epi32(_mm512_and_si512(qs, _mm512_set1_epi32(511)), 1);
      }
      w.scale = nibble_scales(p + 66, fp16_to_f32(load_u16(p)));
    }
    gather_signed_levels(entry, kS ? quant::kIQ2SGrid.data() : quant::kIQ2XSGrid.data(), 64, signs, w.q);
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
constexpr DwordIndex kIq1NibbleShift = shifts(4, 2), kIq1TripleShift = shifts(3, 4);

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
                                                 _mm512_load_si512(kIq1NibbleShift.i));
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
                            _mm512_load_si512(kIq1TripleShift.i)),
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
                                               _mm512_load_si512(kIq1TripleShift.i));
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

constexpr FormatKernels kIq4Xs{DType::IQ4_XS, LaneLayout::row_bytes, convert_q8_k_lanes<128>,
                               matmul_tile<Iq4XsKernel>};
constexpr FormatKernels kIq3S{DType::IQ3_S, LaneLayout::row_bytes, convert_q8_k_lanes<16>,
                              matmul_tile<Iq3Kernel<false>>};
constexpr FormatKernels kIq3Xxs{DType::IQ3_XXS, LaneLayout::row_bytes, convert_q8_k_lanes<64>,
                                matmul_tile<Iq3Kernel<true>>};
constexpr FormatKernels kIq2Xxs{DType::IQ2_XXS, LaneLayout::row_bytes, convert_q8_k_lanes<64>,
                                matmul_tile<Iq2XxsKernel>};
constexpr FormatKernels kIq2Xs{DType::IQ2_XS, LaneLayout::row_bytes, convert_q8_k_lanes<64>, matmul_tile<Iq2Kernel<false>>};
constexpr FormatKernels kIq2S{DType::IQ2_S, LaneLayout::row_bytes, convert_q8_k_lanes<64>, matmul_tile<Iq2Kernel<true>>};
constexpr FormatKernels kIq1S{DType::IQ1_S, LaneLayout::row_bytes, convert_q8_k_lanes<9>, matmul_tile<Iq1Kernel<false>>};
constexpr FormatKernels kIq1M{DType::IQ1_M, LaneLayout::row_bytes, convert_q8_k_lanes<9>, matmul_tile<Iq1Kernel<true>>};

}  // namespace

const FormatKernels* avx512_iq_kernels(DType weight_type) {
  switch (weight_type) {
    case DType::IQ4_XS: return &kIq4Xs;
    case DType::IQ3_S: return &kIq3S;
    case DType::IQ3_XXS: return &kIq3Xxs;
    case DType::IQ2_XXS: return &kIq2Xxs;
    case DType::IQ2_XS: return &kIq2Xs;
    case DType::IQ2_S: return &kIq2S;
    case DType::IQ1_S: return &kIq1S;
    case DType::IQ1_M: return &kIq1M;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu
