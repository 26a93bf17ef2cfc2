// llama.cpp's grid formats IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M: block layouts (byte-compatible
// with GGUF/GGML) and their lookup tables. Each group of 8 weights is one entry of a fixed grid
// (vectors found by llama.cpp's authors to cover Gaussian-like groups well), chosen by an index;
// IQ2 grids hold magnitudes in {8, 25, 43} with separate signs, IQ1 grids values in {-1, 0, 1}
// shifted by a delta of +-1/8. All are super-blocks of 256 (QK_K) with Q8_K activations.
//
// The tables come from gguf-py through scripts/gen_iq_grids.py (iq_grids_data.h: 2-bit codes) and
// are expanded here, at compile time, into llama.cpp's layout: one uint64 per entry, element j in
// byte j, so a kernel loads a group's 8 values with one 64-bit read.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "quant/blocks.h"
#include "quant/iq_grids_data.h"

namespace kestrel::quant {

// IQ2_XXS (2.06 bits per weight): per 32-element sub-block j, two uint32 at qs[4j]: the first is
// 4 grid indices (byte l: group l), the second 4 sign indices of 7 bits (bits 7l .. 7l + 6, into
// kIQ2SignBits) and the 4-bit scale s in bits 28-31. x = d * (0.5 + s) * 0.25 * grid * sign.
struct BlockIQ2_XXS {
  uint16_t d;  // F16 bits
  uint16_t qs[kQK_K / 8];
};
static_assert(sizeof(BlockIQ2_XXS) == 66);

// IQ2_XS (2.31 bpw): qs[4j + l] is group l of sub-block j: grid index in bits 0-8 (iq2xs_grid),
// sign index in bits 9-15. scales[j]: low nibble for the sub-block's first 16 elements, high
// nibble for the last 16; x = d * (0.5 + s) * 0.25 * grid * sign.
struct BlockIQ2_XS {
  uint16_t d;
  uint16_t qs[kQK_K / 8];
  uint8_t scales[kQK_K / 32];
};
static_assert(sizeof(BlockIQ2_XS) == 74);

// IQ2_S (2.56 bpw): group l of sub-block j has grid index qs[4j + l] | bits 2l, 2l + 1 of qh[j]
// as bits 8-9 (iq2s_grid), and its 8 sign bits in qs[32 + 4j + l] (any pattern). Scales as IQ2_XS.
struct BlockIQ2_S {
  uint16_t d;
  uint8_t qs[kQK_K / 4];  // 32 grid index bytes, then 32 sign bytes
  uint8_t qh[kQK_K / 32];
  uint8_t scales[kQK_K / 32];
};
static_assert(sizeof(BlockIQ2_S) == 82);

// IQ1_S (1.56 bpw): group l of sub-block j has grid index qs[4j + l] | bits 3l .. 3l + 2 of qh[j]
// as bits 8-10 (iq1s_grid); qh[j] bits 12-14 are the scale s, bit 15 the delta's sign.
// x = d * (2 s + 1) * (grid + delta), delta = -1/8 if bit 15 is set, else +1/8.
struct BlockIQ1_S {
  uint16_t d;
  uint8_t qs[kQK_K / 8];
  uint16_t qh[kQK_K / 32];
};
static_assert(sizeof(BlockIQ1_S) == 50);

// IQ1_M (1.75 bpw): no d field: the F16 bits of d are the top nibbles of the four uint16 scale
// words (bits 12-15 of word w are bits 4w .. 4w + 3 of d). Group l of sub-block j has grid index
// qs[4j + l] | bits 8-10 from qh[2j + l / 2] (bits 0-2 for even l, 4-6 for odd l); bit 3 (even l)
// or 7 (odd l) of that byte makes the group's delta -1/8 instead of +1/8. Sub-block j's two
// 3-bit scales (first 16 elements, last 16) are bits 6 (j % 2) .. + 2 and 6 (j % 2) + 3 .. + 5
// of scale word j / 2. x = d * (2 s + 1) * (grid + delta).
struct BlockIQ1_M {
  uint8_t qs[kQK_K / 8];
  uint8_t qh[kQK_K / 16];
  uint8_t scales[kQK_K / 32];  // 4 little-endian uint16 words
};
static_assert(sizeof(BlockIQ1_M) == 56);

// The IQ1 delta in units of 1/8: a group's values times 8 are 8 grid + (+-1), exact integers.
inline constexpr float kIQ1Delta = 0.125f;

namespace iq_detail {
template <size_t N>
constexpr std::array<uint64_t, N> expand_grid(const uint16_t (&codes)[N], uint8_t v0, uint8_t v1, uint8_t v2) {
  std::array<uint64_t, N> grid{};
  const uint8_t levels[3] = {v0, v1, v2};
  for (size_t i = 0; i < N; ++i) {
    for (int j = 0; j < 8; ++j) grid[i] |= uint64_t(levels[(codes[i] >> (2 * j)) & 3]) << (8 * j);
  }
  return grid;
}
}  // namespace iq_detail

// llama.cpp's iq2xxs_grid, iq2xs_grid, iq2s_grid (bytes 8, 25, 43) and iq1s_grid (int8 bytes
// -1, 0, 1), element j of an entry in byte j.
inline constexpr std::array<uint64_t, 256> kIQ2XXSGrid = iq_detail::expand_grid(kIQ2XXSGridCodes, 8, 25, 43);
inline constexpr std::array<uint64_t, 512> kIQ2XSGrid = iq_detail::expand_grid(kIQ2XSGridCodes, 8, 25, 43);
inline constexpr std::array<uint64_t, 1024> kIQ2SGrid = iq_detail::expand_grid(kIQ2SGridCodes, 8, 25, 43);
inline constexpr std::array<uint64_t, 2048> kIQ1SGrid = iq_detail::expand_grid(kIQ1SGridCodes, 0xff, 0, 1);

// Grid entry element j as a number (IQ1 bytes are int8).
constexpr int iq_grid_value(uint64_t entry, int j) { return int(uint8_t(entry >> (8 * j))); }
constexpr int iq1_grid_value(uint64_t entry, int j) { return int(int8_t(uint8_t(entry >> (8 * j)))); }

// Index l (0..3) of IQ2_S / IQ1_S / IQ1_M sub-block j (see the layouts above).
inline int iq2s_index(const BlockIQ2_S& b, int j, int l) {
  return b.qs[4 * j + l] | ((b.qh[j] >> (2 * l)) & 3) << 8;
}
inline int iq1s_index(const BlockIQ1_S& b, int j, int l) {
  return b.qs[4 * j + l] | ((b.qh[j] >> (3 * l)) & 7) << 8;
}
inline int iq1m_index(const BlockIQ1_M& b, int j, int l) {
  return b.qs[4 * j + l] | ((b.qh[2 * j + l / 2] >> (4 * (l % 2))) & 7) << 8;
}
// The delta sign (+1 or -1) of IQ1_M group l of sub-block j.
inline int iq1m_delta_sign(const BlockIQ1_M& b, int j, int l) {
  return (b.qh[2 * j + l / 2] >> (4 * (l % 2) + 3)) & 1 ? -1 : 1;
}
// The four IQ1_M scale words and the F16 bits of d assembled from their top nibbles.
inline uint16_t iq1m_scale_word(const BlockIQ1_M& b, int w) {
  return uint16_t(b.scales[2 * w] | b.scales[2 * w + 1] << 8);
}
inline uint16_t iq1m_d_bits(const BlockIQ1_M& b) {
  uint16_t d = 0;
  for (int w = 0; w < 4; ++w) d |= uint16_t((iq1m_scale_word(b, w) >> 12) << (4 * w));
  return d;
}
// The 3-bit scale s (0..7) of half h (0: elements 0-15, 1: 16-31) of IQ1_M sub-block j.
inline int iq1m_scale(const BlockIQ1_M& b, int j, int h) {
  return (iq1m_scale_word(b, j / 2) >> (6 * (j % 2) + 3 * h)) & 7;
}

}  // namespace kestrel::quant
