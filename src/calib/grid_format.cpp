#include "calib/grid_format.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <initializer_list>

#include "core/error.h"
#include "core/half.h"
#include "quant/blocks.h"
#include "quant/format.h"

namespace kestrel::calib {

int AffineGrid::level(float x) const {
  return int(std::clamp(std::nearbyint((x + shift) * inverse), float(qmin), float(qmax))) + offset;
}

// step * (l - offset) is exact in float (an F16, or an F16 times a 6-bit code, times a small
// integer), so this is the format's dequantized value whether or not the compiler fuses it.
float AffineGrid::value(int level) const { return step * float(level - offset) - shift; }

namespace {

// Kestrel's INT4 per-group formats: one grid per block of G values (quant/blocks.h). Sym: F16 d,
// x = d (q - 8); Asym: F16 d and m, x = d q + m; ZeroPoint (INT4_ZP, GPTQ's own grid): x = s (q - z).
class Int4Grid : public GridFormat {
 public:
  enum class Kind { Sym, Asym, ZeroPoint };
  Int4Grid(DType type, int64_t g, Kind kind)
      : GridFormat(type, g, g, quant::require_format(type).block_bytes), symmetric_(kind == Kind::Sym), kind_(kind) {}

  void choose(const float* values, const float* importance, uint8_t* block, AffineGrid* grids) const override {
    quant::quantize_row_with_importance(quant::require_format(type()), values, block, block_values(), importance);
    AffineGrid& grid = grids[0];
    if (kind_ == Kind::ZeroPoint) {
      uint32_t word;
      std::memcpy(&word, block, 4);
      const int z = quant::zp_zero(word);
      grid.step = quant::zp_scale(word);
      grid.inverse = grid.step != 0.0f ? 1.0f / grid.step : 0.0f;
      grid.shift = 0.0f, grid.qmin = -z, grid.qmax = 15 - z, grid.offset = z;
      return;
    }
    uint16_t d_bits, m_bits = 0;
    std::memcpy(&d_bits, block, 2);
    if (!symmetric_) std::memcpy(&m_bits, block + 2, 2);
    grid.step = fp16_to_float(d_bits);
    grid.inverse = grid.step != 0.0f ? 1.0f / grid.step : 0.0f;
    if (symmetric_) {
      grid.shift = 0.0f, grid.qmin = -8, grid.qmax = 7, grid.offset = 8;
    } else {
      grid.shift = -fp16_to_float(m_bits), grid.qmin = 0, grid.qmax = 15, grid.offset = 0;
    }
  }

  void set_levels(uint8_t* block, const uint8_t* levels) const override {
    // Byte l: value l in the low nibble, value l + G/2 in the high one.
    const int64_t g = block_values();
    uint8_t* qs = block + (symmetric_ ? 2 : 4);
    for (int64_t l = 0; l < g / 2; ++l) qs[l] = uint8_t(levels[l] | levels[l + g / 2] << 4);
  }

 private:
  bool symmetric_;
  Kind kind_;
};

// Kestrel's INT3 / INT2 asymmetric per-group formats: one grid (levels 0 .. 2^Bits - 1 above the
// min) per block of G values.
template <int G, int Bits>
class IntLowBitGrid : public GridFormat {
 public:
  explicit IntLowBitGrid(DType type) : GridFormat(type, G, G, sizeof(quant::BlockIntLowBit<G, Bits>)) {}

  void choose(const float* values, const float* importance, uint8_t* block, AffineGrid* grids) const override {
    quant::quantize_row_with_importance(quant::require_format(type()), values, block, G, importance);
    quant::BlockIntLowBit<G, Bits> b;
    std::memcpy(&b, block, sizeof b);
    AffineGrid& grid = grids[0];
    grid.step = fp16_to_float(b.d);
    grid.inverse = grid.step != 0.0f ? 1.0f / grid.step : 0.0f;
    grid.shift = -fp16_to_float(b.m), grid.qmin = 0, grid.qmax = (1 << Bits) - 1, grid.offset = 0;
  }

  void set_levels(uint8_t* block, const uint8_t* levels) const override {
    using Block = quant::BlockIntLowBit<G, Bits>;
    quant::pack_group_levels<G, Bits>(levels, block + offsetof(Block, qs));
  }
};

// llama.cpp's k-quants: super-blocks of 256 values whose sub-blocks each have their own grid, from
// the F16 super-block scale(s) times the sub-block's codes (quant/blocks.h):
//   Q4_K, Q5_K: 8 sub-blocks of 32, 6-bit scale and min codes; levels 0..15 / 0..31, x = d sc q - dmin m
//   Q2_K: 16 of 16, 4-bit scale and min codes; levels 0..3, x = d sc q - dmin m
//   Q3_K: 16 of 16, signed 6-bit scales; levels -4..3, x = d sc q
//   Q6_K: 16 of 16, int8 scales; levels -32..31, x = d sc q
// The grids are read back from the block the format's quantizer wrote; a symmetric format's step
// may be negative (a negative scale code), which the level rounding handles as it is.
template <typename Block>
class KQuantGrid : public GridFormat {
 public:
  using ReadGrids = void (*)(const Block&, AffineGrid*);
  using PackLevels = void (*)(const uint8_t*, Block&);
  KQuantGrid(DType type, int64_t group, ReadGrids read, PackLevels pack)
      : GridFormat(type, quant::kQK_K, group, sizeof(Block)), read_(read), pack_(pack) {}

  void choose(const float* values, const float* importance, uint8_t* block, AffineGrid* grids) const override {
    quant::quantize_row_with_importance(quant::require_format(type()), values, block, quant::kQK_K, importance);
    Block b;
    std::memcpy(&b, block, sizeof b);
    read_(b, grids);
  }

  void set_levels(uint8_t* block, const uint8_t* levels) const override {
    Block b;
    std::memcpy(&b, block, sizeof b);
    pack_(levels, b);
    std::memcpy(block, &b, sizeof b);
  }

 private:
  ReadGrids read_;
  PackLevels pack_;
};

AffineGrid affine_grid(float step, float shift, int qmax) {
  return {step, step > 0.0f ? 1.0f / step : 0.0f, shift, 0, qmax, 0};
}

AffineGrid symmetric_grid(float step, int half) {
  return {step, step != 0.0f ? 1.0f / step : 0.0f, 0.0f, -half, half - 1, half};
}

template <typename Block, int Qmax>
void q45_grids(const Block& b, AffineGrid* grids) {
  const float d = fp16_to_float(b.d), dmin = fp16_to_float(b.dmin);
  for (int j = 0; j < quant::kQK_K / 32; ++j) {
    uint8_t sc, m;
    quant::kquant_scale_min(b.scales, j, &sc, &m);
    grids[j] = affine_grid(d * float(sc), dmin * float(m), Qmax);
  }
}

void q2k_grids(const quant::BlockQ2_K& b, AffineGrid* grids) {
  const float d = fp16_to_float(b.d), dmin = fp16_to_float(b.dmin);
  for (int j = 0; j < quant::kQK_K / 16; ++j) {
    grids[j] = affine_grid(d * float(b.scales[j] & 0x0f), dmin * float(b.scales[j] >> 4), 3);
  }
}

void q3k_grids(const quant::BlockQ3_K& b, AffineGrid* grids) {
  const float d = fp16_to_float(b.d);
  for (int j = 0; j < quant::kQK_K / 16; ++j) grids[j] = symmetric_grid(d * float(quant::q3k_scale(b.scales, j)), 4);
}

void q6k_grids(const quant::BlockQ6_K& b, AffineGrid* grids) {
  const float d = fp16_to_float(b.d);
  for (int j = 0; j < quant::kQK_K / 16; ++j) grids[j] = symmetric_grid(d * float(b.scales[j]), 32);
}

const GridFormat* find(DType type) {
  using K = Int4Grid::Kind;
  static const Int4Grid sym32(DType::INT4_SYM_G32, 32, K::Sym), sym64(DType::INT4_SYM_G64, 64, K::Sym),
      sym128(DType::INT4_SYM_G128, 128, K::Sym), asym32(DType::INT4_ASYM_G32, 32, K::Asym),
      asym64(DType::INT4_ASYM_G64, 64, K::Asym), asym128(DType::INT4_ASYM_G128, 128, K::Asym),
      zp32(DType::INT4_ZP_G32, 32, K::ZeroPoint), zp64(DType::INT4_ZP_G64, 64, K::ZeroPoint),
      zp128(DType::INT4_ZP_G128, 128, K::ZeroPoint);
  static const KQuantGrid<quant::BlockQ2_K> q2k(DType::Q2_K, 16, q2k_grids, quant::pack_q2k_levels);
  static const KQuantGrid<quant::BlockQ3_K> q3k(DType::Q3_K, 16, q3k_grids, quant::pack_q3k_levels);
  static const KQuantGrid<quant::BlockQ4_K> q4k(DType::Q4_K, 32, q45_grids<quant::BlockQ4_K, 15>,
                                                quant::pack_q4k_levels);
  static const KQuantGrid<quant::BlockQ5_K> q5k(DType::Q5_K, 32, q45_grids<quant::BlockQ5_K, 31>,
                                                quant::pack_q5k_levels);
  static const KQuantGrid<quant::BlockQ6_K> q6k(DType::Q6_K, 16, q6k_grids, quant::pack_q6k_levels);
  static const IntLowBitGrid<64, 3> int3_64(DType::INT3_ASYM_G64);
  static const IntLowBitGrid<128, 3> int3_128(DType::INT3_ASYM_G128);
  static const IntLowBitGrid<64, 2> int2_64(DType::INT2_ASYM_G64);
  static const IntLowBitGrid<128, 2> int2_128(DType::INT2_ASYM_G128);
  static const GridFormat* const all[] = {&sym32, &sym64, &sym128, &asym32, &asym64, &asym128, &zp32, &zp64, &zp128,
                                          &q2k, &q3k, &q4k, &q5k, &q6k, &int3_64, &int3_128, &int2_64, &int2_128};
  for (const GridFormat* f : all) {
    if (f->type() == type) return f;
  }
  return nullptr;
}

}  // namespace

bool GridFormat::supports(DType type) { return find(type) != nullptr; }

const GridFormat& GridFormat::of(DType type) {
  const GridFormat* f = find(type);
  if (f == nullptr) {
    fail("GPTQ cannot target {}: it quantizes to {}", dtype_name(type), kGptqTargets);
  }
  return *f;
}

}  // namespace kestrel::calib
