// A weight format is a block layout plus kernels. This table gives, for each format Kestrel can
// compute with, the scalar reference kernels: quantize a row of floats, dequantize a row, and dot
// a weight row with an activation row that was first converted to the format's activation type
// (as GGML does: F16 weights meet F16 activations, integer formats meet Q8_0 activations, k-quants
// meet Q8_K, so the inner loop can use integer dot products). Fast kernels are checked against
// these. Activation-only types (Q8_1, Q8_K) are in the table too, so their quantize_row can be
// found the same way.
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace kestrel::quant {

using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n);
using DequantizeRowFn = void (*)(const void* src, float* dst, int64_t n);
// Dot product of n elements: weight row (format's layout) . activation row (activation type).
// Quantize with an importance weight per value (importance[i] for src[i]; an imatrix's column means).
using QuantizeRowWeightedFn = void (*)(const float* src, void* dst, int64_t n, const float* importance);
using VecDotFn = float (*)(const void* weight_row, const void* activation_row, int64_t n);

// A row is row_header_bytes (per-row scale of the per-channel formats; 0 for GGML types) then
// n / block_size blocks of block_bytes; the kernels take and return whole rows, header included.
struct WeightFormat {
  DType type;
  int64_t block_size;
  int64_t block_bytes;
  QuantizeRowFn quantize_row;
  DequantizeRowFn dequantize_row;
  DType activation_type;
  VecDotFn vec_dot;
  int64_t row_header_bytes = 0;
  QuantizeRowWeightedFn quantize_row_weighted = nullptr;  // null: the format ignores importance
};

// The format for `type`, or nullptr if Kestrel has no kernels for it.
const WeightFormat* find_format(DType type);
// Like find_format but throws a kestrel::Error naming the type.
const WeightFormat& require_format(DType type);

// Every format with kernels, GGML's first, then Kestrel's (for tests and listings).
std::span<const WeightFormat> all_formats();

// Quantizes a row with the format's importance-weighted quantizer when importance is given and the
// format has one, else with its plain quantizer.
inline void quantize_row_with_importance(const WeightFormat& format, const float* src, void* dst, int64_t n,
                                         const float* importance) {
  if (importance != nullptr && format.quantize_row_weighted != nullptr) {
    format.quantize_row_weighted(src, dst, n, importance);
  } else {
    format.quantize_row(src, dst, n);
  }
}

// Whether `from` has an exact re-encoding as `to` (the compute encodings of core/dtype.h: IQ3_S as
// IQ3_S_L4), and the re-encoding of `blocks` whole blocks, every value unchanged (throws for a pair
// without one).
bool can_transcode(DType from, DType to);
void transcode_blocks(DType from, DType to, const void* src, void* dst, int64_t blocks);

inline int64_t row_bytes(const WeightFormat& format, int64_t n) {
  return format.row_header_bytes + n / format.block_size * format.block_bytes;
}

}  // namespace kestrel::quant
