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

// llama.cpp's Q4_K: super-blocks of 256 values, one grid per 32-value sub-block from the F16 d and
// dmin times that sub-block's 6-bit scale and min codes.
class Q4KGrid : public GridFormat {
 public:
  Q4KGrid() : GridFormat(DType::Q4_K, quant::kQK_K, 32, sizeof(quant::BlockQ4_K)) {}

  void choose(const float* values, const float* importance, uint8_t* block, AffineGrid* grids) const override {
    quant::quantize_row_with_importance(quant::require_format(DType::Q4_K), values, block, quant::kQK_K, importance);
    quant::BlockQ4_K b;
    std::memcpy(&b, block, sizeof b);
    const float d = fp16_to_float(b.d), dmin = fp16_to_float(b.dmin);
    for (int j = 0; j < quant::kQK_K / 32; ++j) {
      uint8_t sc, m;
      quant::kquant_scale_min(b.scales, j, &sc, &m);
      AffineGrid& grid = grids[j];
      grid.step = d * float(sc);
      grid.inverse = grid.step > 0.0f ? 1.0f / grid.step : 0.0f;
      grid.shift = dmin * float(m);
      grid.qmin = 0, grid.qmax = 15, grid.offset = 0;
    }
  }

  void set_levels(uint8_t* block, const uint8_t* levels) const override {
    // Each 64-value chunk: byte l = value l (low nibble) | value l + 32 (high nibble).
    uint8_t* qs = block + offsetof(quant::BlockQ4_K, qs);
    for (int chunk = 0; chunk < quant::kQK_K / 64; ++chunk) {
      const uint8_t* q = levels + chunk * 64;
      for (int l = 0; l < 32; ++l) qs[chunk * 32 + l] = uint8_t(q[l] | q[l + 32] << 4);
    }
  }
};

const GridFormat* find(DType type) {
  using K = Int4Grid::Kind;
  static const Int4Grid sym32(DType::INT4_SYM_G32, 32, K::Sym), sym64(DType::INT4_SYM_G64, 64, K::Sym),
      sym128(DType::INT4_SYM_G128, 128, K::Sym), asym32(DType::INT4_ASYM_G32, 32, K::Asym),
      asym64(DType::INT4_ASYM_G64, 64, K::Asym), asym128(DType::INT4_ASYM_G128, 128, K::Asym),
      zp32(DType::INT4_ZP_G32, 32, K::ZeroPoint), zp64(DType::INT4_ZP_G64, 64, K::ZeroPoint),
      zp128(DType::INT4_ZP_G128, 128, K::ZeroPoint);
  static const Q4KGrid q4k;
  static const IntLowBitGrid<64, 3> int3_64(DType::INT3_ASYM_G64);
  static const IntLowBitGrid<128, 3> int3_128(DType::INT3_ASYM_G128);
  static const IntLowBitGrid<64, 2> int2_64(DType::INT2_ASYM_G64);
  static const IntLowBitGrid<128, 2> int2_128(DType::INT2_ASYM_G128);
  for (const GridFormat* f : {static_cast<const GridFormat*>(&sym32), static_cast<const GridFormat*>(&sym64),
                              static_cast<const GridFormat*>(&sym128), static_cast<const GridFormat*>(&asym32),
                              static_cast<const GridFormat*>(&asym64), static_cast<const GridFormat*>(&asym128),
                              static_cast<const GridFormat*>(&q4k), static_cast<const GridFormat*>(&int3_64),
                              static_cast<const GridFormat*>(&int3_128), static_cast<const GridFormat*>(&int2_64),
                              static_cast<const GridFormat*>(&int2_128), static_cast<const GridFormat*>(&zp32),
                              static_cast<const GridFormat*>(&zp64), static_cast<const GridFormat*>(&zp128)}) {
    if (f->type() == type) return f;
  }
  return nullptr;
}

}  // namespace

bool GridFormat::supports(DType type) { return find(type) != nullptr; }

const GridFormat& GridFormat::of(DType type) {
  const GridFormat* f = find(type);
  if (f == nullptr) {
    fail("GPTQ cannot target {}: it quantizes to Q4_K, INT4_SYM_G32/G64/G128, INT4_ASYM_G32/G64/G128, "
         "INT4_ZP_G32/G64/G128, INT3_ASYM_G64/G128 and INT2_ASYM_G64/G128",
         dtype_name(type));
  }
  return *f;
}

}  // namespace kestrel::calib
