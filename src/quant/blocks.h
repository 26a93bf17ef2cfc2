// Block layouts of the quantized weight formats, byte-compatible with GGUF/GGML files.
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>

namespace kestrel::quant {

inline constexpr int kQ8_0BlockSize = 32;
inline constexpr int kQ4_0BlockSize = 32;

// Q8_0: 32 signed bytes and one F16 scale; x[i] = d * qs[i].
struct BlockQ8_0 {
  uint16_t d;  // F16 bits
  int8_t qs[kQ8_0BlockSize];
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q4_0: 32 4-bit values and one F16 scale; x[i] = d * (q[i] - 8). Byte j holds element j in its
// low nibble and element j + 16 in its high nibble.
struct BlockQ4_0 {
  uint16_t d;  // F16 bits
  uint8_t qs[kQ4_0BlockSize / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q8_1: Q8_0 plus s = d * sum(qs) in F16, so a dot with an offset weight format (x = d q + m)
// gets sum(activations) without a second pass. The activation format of the asymmetric INT4 types.
struct BlockQ8_1 {
  uint16_t d;  // F16 bits
  uint16_t s;  // F16 bits: d * sum(qs)
  int8_t qs[kQ8_0BlockSize];
};
static_assert(sizeof(BlockQ8_1) == 36);

// Q4_1: x = d * q + m, q in [0, 15] (nibble order as Q4_0).
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0: x = d * (q - 16), q in [0, 31]: 4 low bits in qs (as Q4_0), the fifth bit of element j in
// bit j of the little-endian 32-bit qh.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q5_1: x = d * q + m, q in [0, 31], bits as Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_1) == 24);

// k-quants: super-blocks of 256 values (QK_K), byte-compatible with GGML.
inline constexpr int kQK_K = 256;
inline constexpr int kKScaleSize = 12;

// Q4_K: 8 sub-blocks of 32, each with a 6-bit scale and 6-bit min packed into `scales`;
// x = d * scale_j * q - dmin * min_j, q in [0, 15]. Byte l of qs holds elements l (low nibble) and
// l + 32 (high nibble) of each 64-element half.
struct BlockQ4_K {
  uint16_t d;     // F16 super-block scale of the scales
  uint16_t dmin;  // F16 super-block scale of the mins
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q5_K: as Q4_K plus a fifth bit per value in qh.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// Q6_K: 16 sub-blocks of 16 with int8 scales; x = d * scale_j * (q - 32), q in [0, 63] from 4 low
// bits in ql and 2 high bits in qh.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Q2_K: 16 sub-blocks of 16, each with a 4-bit scale (low nibble of scales[j]) and a 4-bit min
// (high nibble); x = d * scale_j * q - dmin * min_j, q in [0, 3] at bits 2k, 2k + 1 of byte
// 32h + l of qs for value 128h + 32k + l (Q3_K's low bits, without the high-bit mask).
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;     // F16 super-block scale of the scales
  uint16_t dmin;  // F16 super-block scale of the mins
};
static_assert(sizeof(BlockQ2_K) == 84);

// The level (q in [0, 3]) of value i of a Q2_K block.
inline int q2k_level(const BlockQ2_K& b, int i) {
  const int half = i / 128, k = (i % 128) / 32, l = i % 32;
  return (b.qs[32 * half + l] >> (2 * k)) & 3;
}

// Q3_K: 16 sub-blocks of 16 with signed 6-bit scales; x = d * (scale_j - 32) * (q - 4), q in
// [0, 7]: its low 2 bits in qs (byte 32h + l holds values 128h + 32k + l at bits 2k, 2k + 1), its
// high bit in hmask (bit 4h + k of byte l for the same value). scales: 16 codes of 6 bits, the low
// 4 bits of code j in byte j (j < 8) or the high nibble of byte j - 8, the top 2 bits in byte
// 8 + j % 4 at bits 2 (j / 4), 2 (j / 4) + 1.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[kKScaleSize];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

// The signed scale (code - 32, in [-32, 31]) of sub-block j of a Q3_K block.
inline int q3k_scale(const uint8_t* scales, int j) {
  const int low = j < 8 ? scales[j] & 0x0f : scales[j - 8] >> 4;
  const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | high << 4) - 32;
}

// The 16 unsigned scale codes of a Q3_K block (code j = q3k_scale(j) + 32) as bytes of four
// words: word w holds codes 4w .. 4w + 3 in the order the SIMD kernels take them (j % 8 < 4 first).
inline void q3k_scale_code_words(const uint8_t* scales, uint32_t words[4]) {
  uint32_t a0, a1, top;
  std::memcpy(&a0, scales, 4);
  std::memcpy(&a1, scales + 4, 4);
  std::memcpy(&top, scales + 8, 4);
  const uint32_t low4 = 0x0f0f0f0fu, top2 = 0x03030303u;
  words[0] = (a0 & low4) | (top & top2) << 4;
  words[1] = (a1 & low4) | ((top >> 2) & top2) << 4;
  words[2] = ((a0 >> 4) & low4) | ((top >> 4) & top2) << 4;
  words[3] = ((a1 >> 4) & low4) | ((top >> 6) & top2) << 4;
}

// The level (q in [0, 7]; the value is q - 4) of value i of a Q3_K block.
inline int q3k_level(const BlockQ3_K& b, int i) {
  const int half = i / 128, k = (i % 128) / 32, l = i % 32;
  const int low = (b.qs[32 * half + l] >> (2 * k)) & 3;
  const int high = (b.hmask[l] >> (4 * half + k)) & 1;
  return low | high << 2;
}

// Level packers: the stored levels of a super-block's 256 values (unsigned, as the _level readers
// return them before any offset) into its bit fields, scales left as they are. Shared by the
// quantizers and GPTQ (which keeps a block's scales and moves only its levels).

// Q2_K: levels in [0, 3].
inline void pack_q2k_levels(const uint8_t levels[kQK_K], BlockQ2_K& b) {
  std::memset(b.qs, 0, sizeof b.qs);
  for (int i = 0; i < kQK_K; ++i) {
    const int half = i / 128, k = (i % 128) / 32, l = i % 32;
    b.qs[32 * half + l] = uint8_t(b.qs[32 * half + l] | levels[i] << (2 * k));
  }
}

// Q3_K: levels q in [0, 7] (the value is q - 4).
inline void pack_q3k_levels(const uint8_t levels[kQK_K], BlockQ3_K& b) {
  std::memset(b.hmask, 0, sizeof b.hmask);
  std::memset(b.qs, 0, sizeof b.qs);
  for (int i = 0; i < kQK_K; ++i) {
    const int half = i / 128, k = (i % 128) / 32, l = i % 32;
    b.qs[32 * half + l] = uint8_t(b.qs[32 * half + l] | (levels[i] & 3) << (2 * k));
    b.hmask[l] = uint8_t(b.hmask[l] | (levels[i] >> 2) << (4 * half + k));
  }
}

// Q4_K: levels in [0, 15]; each 64-value chunk's byte l = value l (low nibble) | value l + 32.
inline void pack_q4k_levels(const uint8_t levels[kQK_K], BlockQ4_K& b) {
  for (int chunk = 0; chunk < kQK_K / 64; ++chunk) {
    const uint8_t* q = levels + chunk * 64;
    for (int l = 0; l < 32; ++l) b.qs[chunk * 32 + l] = uint8_t(q[l] | q[l + 32] << 4);
  }
}

// Q5_K: levels in [0, 31]: the low 4 bits as Q4_K's; the fifth bit of value l (l + 32) of chunk c
// is bit 2c (2c + 1) of qh[l].
inline void pack_q5k_levels(const uint8_t levels[kQK_K], BlockQ5_K& b) {
  std::memset(b.qh, 0, sizeof b.qh);
  for (int chunk = 0; chunk < kQK_K / 64; ++chunk) {
    const uint8_t* q = levels + chunk * 64;
    for (int l = 0; l < 32; ++l) {
      b.qs[chunk * 32 + l] = uint8_t((q[l] & 0x0f) | (q[l + 32] & 0x0f) << 4);
      b.qh[l] = uint8_t(b.qh[l] | (q[l] >> 4) << (2 * chunk) | (q[l + 32] >> 4) << (2 * chunk + 1));
    }
  }
}

// Q6_K: levels q in [0, 63] (the value is q - 32). Each 128-value half: ql byte l holds values l
// and l + 64 (low 4 bits), byte l + 32 values l + 32 and l + 96; qh byte l the top 2 bits of
// values l, l + 32, l + 64, l + 96.
inline void pack_q6k_levels(const uint8_t levels[kQK_K], BlockQ6_K& b) {
  for (int half = 0; half < 2; ++half) {
    const uint8_t* q = levels + half * 128;
    uint8_t* ql = b.ql + half * 64;
    uint8_t* qh = b.qh + half * 32;
    for (int l = 0; l < 32; ++l) {
      ql[l] = uint8_t((q[l] & 0x0f) | (q[l + 64] & 0x0f) << 4);
      ql[l + 32] = uint8_t((q[l + 32] & 0x0f) | (q[l + 96] & 0x0f) << 4);
      qh[l] = uint8_t((q[l] >> 4) | (q[l + 32] >> 4) << 2 | (q[l + 64] >> 4) << 4 | (q[l + 96] >> 4) << 6);
    }
  }
}

// Q8_K: the activation format for k-quant dot products (never stored in files).
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // sums of qs in groups of 16
};
static_assert(sizeof(BlockQ8_K) == 292);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block. Bytes 0-3 hold the low 6
// bits of scales 0-3, bytes 4-7 the low 6 bits of mins 0-3; for j >= 4 the low 4 bits of scale
// and min are the two nibbles of byte j + 4 and their top 2 bits are the top bits of bytes j - 4
// (scale) and j (min).
inline void kquant_scale_min(const uint8_t* scales, int j, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = uint8_t((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4));
    *min = uint8_t((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// ---------------------------------------------------------------------------------------------
// llama.cpp's non-linear 4-bit formats: each 4-bit index selects one of 16 fixed int8 levels
// (kIQ4Levels, denser near zero), scaled per block. Nibble order as Q4_0: byte j of a 32-element
// group holds element j in its low nibble and element j + 16 in its high nibble.
inline constexpr int8_t kIQ4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};
inline constexpr int kIQ4_NLBlockSize = 32;

// IQ4_NL: x[i] = d * kIQ4Levels[index i]; activations Q8_0.
struct BlockIQ4_NL {
  uint16_t d;  // F16 bits
  uint8_t qs[kIQ4_NLBlockSize / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

// IQ4_XS: super-blocks of 256 = 8 sub-blocks of 32, each with a 6-bit scale code ls (stored as
// the signed scale + 32: its low 4 bits in nibble j of scales_l, i.e. byte j / 2, low nibble for
// even j; its top 2 bits at bits 2j, 2j + 1 of scales_h); x = (d * (ls - 32)) * kIQ4Levels[index].
// Sub-block j's indices are qs[16 j .. 16 j + 15]. Activations Q8_K.
struct BlockIQ4_XS {
  uint16_t d;  // F16 bits
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// The signed scale (ls - 32, in [-32, 31]) of sub-block j of an IQ4_XS block.
inline int iq4xs_scale(const BlockIQ4_XS& b, int j) {
  const int low = (b.scales_l[j / 2] >> (4 * (j % 2))) & 0x0f;
  const int high = (b.scales_h >> (2 * j)) & 3;
  return (low | high << 4) - 32;
}

// ---------------------------------------------------------------------------------------------
// llama.cpp's ternary formats (BitNet b1.58, TriLMs): super-blocks of 256 values in {-1, 0, 1}
// times one F16 scale d (the block's largest magnitude); activations Q8_K.

// TQ2_0: 2 bits per value, code c in [0, 3], x = d * (c - 1) (quantizers write 0..2; code 3
// decodes to 2d). Byte 32h + m of qs holds values 128h + 32l + m at bits 2l, 2l + 1 (l = 0..3).
struct BlockTQ2_0 {
  uint8_t qs[kQK_K / 4];
  uint16_t d;  // F16 bits
};
static_assert(sizeof(BlockTQ2_0) == 66);

// TQ1_0: 5 trits per byte, base 3, stored as the fraction ceil(t * 256 / 243) of the 5-trit
// number t (first trit most significant), so trit n of a byte b is (uint8(b * 3^n) * 3) >> 8;
// x = d * (trit - 1). qs[m], m < 32: trit n is value 32n + m (values 0..159); qs[32 + m],
// m < 16: trit n is value 160 + 16n + m (160..239); qh[j], j < 4: trits 0..3 (the fifth is 0)
// are values 240 + 4n + j.
struct BlockTQ1_0 {
  uint8_t qs[48];
  uint8_t qh[4];
  uint16_t d;  // F16 bits
};
static_assert(sizeof(BlockTQ1_0) == 54);

// Trit n (0..4) of a TQ1_0 byte: 0, 1 or 2 for every byte value.
inline int tq1_trit(uint8_t byte, int n) {
  constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  return (uint8_t(byte * kPow3[n]) * 3) >> 8;
}

// ---------------------------------------------------------------------------------------------
// MXFP4 (OCP microscaling, as gpt-oss uses): blocks of 32 E2M1 values sharing an E8M0 exponent
// e; x = 2^(e - 128) * kMXFP4Levels[index] (the levels are E2M1 values doubled, so the scale is
// half of E8M0's 2^(e - 127); e = 0 and 1 give the subnormals 2^-128, 2^-127). Nibble order as
// Q4_0: byte j holds element j (low nibble) and j + 16 (high). Activations Q8_0.
inline constexpr int8_t kMXFP4Levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
inline constexpr int kMXFP4BlockSize = 32;

struct BlockMXFP4 {
  uint8_t e;  // E8M0 exponent
  uint8_t qs[kMXFP4BlockSize / 2];
};
static_assert(sizeof(BlockMXFP4) == 17);

// 2^(e - 128) as llama.cpp's ggml_e8m0_to_fp32_half builds it: F32 bits (e - 1) << 23 for e >= 2,
// the subnormals 0x00200000 << e below (e = 255 is 2^127, not NaN).
inline uint32_t mxfp4_scale_bits(uint8_t e) { return e < 2 ? 0x00200000u << e : uint32_t(e - 1) << 23; }
// llama.cpp's 3-bit grid formats (activations Q8_K): super-blocks of 256 = 8 sub-blocks of 32,
// each value d_j * g * sign where groups of 4 consecutive values take their magnitudes g from one
// entry of a fixed grid (quant/iq3_grids.h: 4 unsigned bytes per entry) and each value has a sign.

// IQ3_XXS (3.0625 bits per value): qs[8 j + k] is the 8-bit grid index (kIQ3XXSGrid) of values
// 32 j + 4 k .. + 3 of sub-block j. signs_scales[4 j .. 4 j + 3] is sub-block j's little-endian
// uint32: bits 7 l .. 7 l + 6 index kIQ3Signs for the signs of values 32 j + 8 l .. + 7 (bit i of
// the sign byte: value i negative), bits 28-31 the scale code s; d_j = d * (0.5 + s) * 0.5.
struct BlockIQ3_XXS {
  uint16_t d;  // F16 bits
  uint8_t qs[kQK_K / 4];
  uint8_t signs_scales[kQK_K / 8];
};
static_assert(sizeof(BlockIQ3_XXS) == 98);

// IQ3_S (3.4375 bits per value): the grid index (kIQ3SGrid) of values 32 j + 4 k .. + 3 is
// qs[8 j + k] | bit k of qh[j] << 8; bit i of signs[4 j + l] is the sign of value 32 j + 8 l + i;
// scale code s_j is nibble j % 2 of scales[j / 2] (low nibble for even j); d_j = d * (1 + 2 s_j).
struct BlockIQ3_S {
  uint16_t d;  // F16 bits
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t signs[kQK_K / 8];
  uint8_t scales[kQK_K / 64];
};
static_assert(sizeof(BlockIQ3_S) == 110);

// ---------------------------------------------------------------------------------------------
// Kestrel's own formats (DType ids >= 1000, see core/dtype.h).

// IQ3_S_L4 (an in-memory compute encoding of IQ3_S, core/dtype.h): IQ3_S's d and scale codes as
// they are, then the 256 values as 4-bit levels n, value 2 n - 15 times the step d (2 s_j + 1):
// element 64 c + 32 h + l is nibble h (0: low) of qs[32 c + l], as Q4_K orders its nibbles.
struct BlockIQ3_S_L4 {
  uint16_t d;  // F16 bits
  uint8_t scales[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockIQ3_S_L4) == 134);

// INT4 per group of G values. Byte l of qs holds element l in its low nibble and element l + G/2
// in its high nibble (as Q4_0 does), so the low nibbles are the first half of the group in order.
// Symmetric: x = d * (q - 8).
template <int G>
struct BlockInt4Sym {
  uint16_t d;  // F16 bits
  uint8_t qs[G / 2];
};
static_assert(sizeof(BlockInt4Sym<32>) == 18 && sizeof(BlockInt4Sym<64>) == 34 &&
              sizeof(BlockInt4Sym<128>) == 66);

// Asymmetric: x = d * q + m (m is usually the group's minimum).
template <int G>
struct BlockInt4Asym {
  uint16_t d;  // F16 bits
  uint16_t m;  // F16 bits
  uint8_t qs[G / 2];
};
static_assert(sizeof(BlockInt4Asym<32>) == 20 && sizeof(BlockInt4Asym<64>) == 36 &&
              sizeof(BlockInt4Asym<128>) == 68);

// With an integer zero point (GPTQ, AWQ, compressed-tensors): x = s * (q - z). scale_zero is the
// F32 bits of s with z in the low 8 bits (an F16 or BF16 s widened to F32 has them clear; s * z is
// then exact in F32, so the kernels use m = -s * z as an asymmetric format's min).
template <int G>
struct BlockInt4Zp {
  uint32_t scale_zero;
  uint8_t qs[G / 2];
};
static_assert(sizeof(BlockInt4Zp<32>) == 20 && sizeof(BlockInt4Zp<64>) == 36 && sizeof(BlockInt4Zp<128>) == 68);
inline float zp_scale(uint32_t scale_zero) {
  const uint32_t bits = scale_zero & 0xffffff00u;
  float s;
  std::memcpy(&s, &bits, 4);
  return s;
}
inline int zp_zero(uint32_t scale_zero) { return int(scale_zero & 0xffu); }
// The group's scale and the asymmetric formats' min, m = -s z (exact): what the kernels use.
inline std::pair<float, float> zp_scale_and_min(uint32_t scale_zero) {
  const float s = zp_scale(scale_zero);
  return {s, -s * float(zp_zero(scale_zero))};
}
// The same from a block in memory (its first 4 bytes).
inline std::pair<float, float> zp_scale_and_min(const uint8_t* block) {
  uint32_t word;
  std::memcpy(&word, block, 4);
  return zp_scale_and_min(word);
}
// Writes the word for scale s and zero z; false (nothing written) when s's low 8 bits are not
// clear (an F32 scale with more than 16 significant bits) or z is outside [0, 255].
inline bool zp_pack(float s, int z, uint32_t* scale_zero) {
  uint32_t bits;
  std::memcpy(&bits, &s, 4);
  if ((bits & 0xffu) != 0 || z < 0 || z > 255) return false;
  *scale_zero = bits | uint32_t(z);
  return true;
}

// INT3 / INT2, asymmetric, per group of G (64 or 128): x = d * q + m. q holds the levels in bit
// planes strided so that a shift and a mask give 32 consecutive values (one activation block): the
// low 2 bits of value i at bits 2 (i / (G/4)) of byte i % (G/4) (G/4 bytes), then for INT3 the high
// bit of value i at bit i / (G/8) of byte G/4 + i % (G/8) (G/8 bytes).
template <int G, int Bits>
struct BlockIntLowBit {
  static_assert((G == 64 || G == 128) && (Bits == 2 || Bits == 3));
  uint16_t d;  // F16 bits
  uint16_t m;  // F16 bits
  uint8_t qs[G * Bits / 8];
};
static_assert(sizeof(BlockIntLowBit<64, 3>) == 28 && sizeof(BlockIntLowBit<128, 3>) == 52 &&
              sizeof(BlockIntLowBit<64, 2>) == 20 && sizeof(BlockIntLowBit<128, 2>) == 36);

// The level of value i of a group's packed levels (qs): INT4 (Bits 4) as nibbles, byte i % (G/2), low
// nibble for the first half; INT3/INT2 in the strided bit planes above.
template <int G, int Bits>
inline int group_level(const uint8_t* q, int i) {
  if constexpr (Bits == 4) {
    return i < G / 2 ? q[i % (G / 2)] & 0x0f : q[i % (G / 2)] >> 4;
  } else {
    int level = (q[i % (G / 4)] >> (2 * (i / (G / 4)))) & 3;
    if constexpr (Bits == 3) level |= ((q[G / 4 + i % (G / 8)] >> (i / (G / 8))) & 1) << 2;
    return level;
  }
}

// Packs G levels (each below 2^Bits) into a group's q (the inverse of group_level).
template <int G, int Bits>
inline void pack_group_levels(const uint8_t* levels, uint8_t* q) {
  if constexpr (Bits == 4) {
    for (int l = 0; l < G / 2; ++l) q[l] = uint8_t(levels[l] | levels[l + G / 2] << 4);
  } else {
    for (int b = 0; b < G * Bits / 8; ++b) q[b] = 0;
    for (int i = 0; i < G; ++i) {
      q[i % (G / 4)] = uint8_t(q[i % (G / 4)] | (levels[i] & 3) << (2 * (i / (G / 4))));
      if constexpr (Bits == 3) {
        q[G / 4 + i % (G / 8)] = uint8_t(q[G / 4 + i % (G / 8)] | ((levels[i] >> 2) & 1) << (i / (G / 8)));
      }
    }
  }
}

// NF4 (DType::NF4): bitsandbytes' 16 NormalFloat code values (bitsandbytes/backends/utils.py,
// _NF4_QUANT_TABLE), ascending, index 7 exactly 0. Blocks of 64 with an F16 absmax d; index i of
// a block at group_level<64, 4> (byte i % 32, low nibble for values 0-31, high for 32-63), so a
// 16-byte load and a nibble split give one Q8_0 activation block's halves.
inline constexpr float kNF4Codes[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
    -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
    0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
    0.7229568362236023f, 1.0f};
inline constexpr int kNF4BlockSize = 64;
// The levels the format computes with: code * 16256 (= 127 * 128) rounded to int16, i.e. the codes
// to 3.1e-5, 16x finer than the F16 absmax's own rounding (2^-11). x = d * level / 16256. A level
// splits exactly into 128 * hi + lo with hi = round(code * 127) and |lo| <= 64, two int8 tables the
// SIMD kernels shuffle from, so their integer sums are the reference's.
inline constexpr int kNF4LevelScale = 16256;
struct NF4LevelTable {
  int16_t v[16];
};
inline constexpr NF4LevelTable kNF4Levels = [] {
  NF4LevelTable table{};
  for (int i = 0; i < 16; ++i) {
    const float v = kNF4Codes[i] * float(kNF4LevelScale);
    table.v[i] = int16_t(v >= 0.0f ? int(v + 0.5f) : -int(-v + 0.5f));
  }
  return table;
}();
inline constexpr int16_t nf4_level(int index) { return kNF4Levels.v[index]; }
inline constexpr int8_t nf4_level_high(int index) {
  const int level = nf4_level(index);
  return int8_t(level >= 0 ? (level + 64) / 128 : -((-level + 63) / 128));
}
inline constexpr int8_t nf4_level_low(int index) { return int8_t(nf4_level(index) - 128 * nf4_level_high(index)); }

struct BlockNF4 {
  uint16_t d;  // F16 bits
  uint8_t qs[kNF4BlockSize / 2];
};
static_assert(sizeof(BlockNF4) == 34);

// INT8_PC and FP8_E4M3_PC rows: a 4-byte F32 scale (the row header, read with memcpy: a row of
// FP8_E4M3_PC may start at any byte), then one byte per element.
inline constexpr int64_t kPerChannelHeaderBytes = 4;

}  // namespace kestrel::quant
