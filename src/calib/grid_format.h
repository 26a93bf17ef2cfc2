// How GPTQ reads and writes one weight format: the format's own quantizer chooses the grids of a
// block (its scales and minimums, quantized as the format stores them), and GPTQ then only picks
// each value's level on those grids. Every format here is affine per group of values:
//   level(x) = clamp(round((x + shift) * inverse), qmin, qmax) + offset   (ties to even)
//   value(l) = step * (l - offset) - shift
// which is how each format's round-to-nearest assigns and dequantizes (INT4 symmetric: shift 0,
// levels -8..7 stored +8; INT4 asymmetric: shift = -m; Q4_K: step = d * scale, shift = dmin *
// min of the 32-value sub-block; Q3_K: step = d * signed scale, levels -4..3 stored +4), so a grid
// with no error to spread reproduces the format's bytes.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace kestrel::calib {

// The formats GPTQ can target, as the errors list them.
inline constexpr const char* kGptqTargets =
    "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, INT4_SYM_G32/G64/G128, INT4_ASYM_G32/G64/G128, INT4_ZP_G32/G64/G128, "
    "INT3_ASYM_G64/G128 and INT2_ASYM_G64/G128";

struct AffineGrid {
  float step = 0.0f, inverse = 0.0f, shift = 0.0f;
  int qmin = 0, qmax = 15, offset = 0;

  int level(float x) const;
  float value(int level) const;
};

class GridFormat {
 public:
  // The format's adapter; throws naming the type (and what GPTQ supports) if there is none.
  static const GridFormat& of(DType type);
  static bool supports(DType type);

  virtual ~GridFormat() = default;
  DType type() const { return type_; }
  int64_t block_values() const { return block_values_; }  // values whose grids are chosen together
  int64_t group_values() const { return group_values_; }  // values sharing one AffineGrid
  int64_t block_bytes() const { return block_bytes_; }

  // Quantizes block_values() values with the format's quantizer (importance-weighted when
  // importance is given and the format has a weighted quantizer) into `block`, and returns the
  // block's grids (block_values() / group_values() of them) in `grids`.
  virtual void choose(const float* values, const float* importance, uint8_t* block, AffineGrid* grids) const = 0;
  // Writes the levels (0..qmax+offset) of the block's values into it, keeping its scales.
  virtual void set_levels(uint8_t* block, const uint8_t* levels) const = 0;

 protected:
  GridFormat(DType type, int64_t block_values, int64_t group_values, int64_t block_bytes)
      : type_(type), block_values_(block_values), group_values_(group_values), block_bytes_(block_bytes) {}

 private:
  DType type_;
  int64_t block_values_, group_values_, block_bytes_;
};

}  // namespace kestrel::calib
