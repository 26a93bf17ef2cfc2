// Tensor element types. The numeric values below 1000 are GGML's (they are what GGUF files store),
// so a GGUF tensor type converts with a range check and nothing else. Ids from 1000 up are
// Kestrel's own formats (produced by `kestrel quantize` and the quantization toolkit); GGML's ids
// are small (< 100), so they cannot collide. llama.cpp cannot load files that use them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kestrel {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,

  // Kestrel formats (layouts in quant/blocks.h; x is the dequantized value):
  // INT8 per output channel: each row is one F32 scale, then k int8 values; x = scale * q.
  INT8_PC = 1000,
  // INT4 per group of G (32, 64, 128), symmetric: per group an F16 scale d and G/2 bytes of
  // nibbles; x = d * (q - 8), q in [0, 15] (i.e. signed [-8, 7]).
  INT4_SYM_G32 = 1001,
  INT4_SYM_G64 = 1002,
  INT4_SYM_G128 = 1003,
  // INT4 per group, asymmetric: per group an F16 scale d, an F16 min m and G/2 bytes of nibbles;
  // x = d * q + m, q in [0, 15].
  INT4_ASYM_G32 = 1004,
  INT4_ASYM_G64 = 1005,
  INT4_ASYM_G128 = 1006,
  // FP8 E4M3 (OCP: bias 7, no infinities, max 448) per output channel: each row is one F32 scale,
  // then k E4M3 bytes; x = scale * e4m3(q).
  FP8_E4M3_PC = 1007,
  // W8A8: INT8_PC's layout (an F32 scale per row, then k int8 values), computed against activations
  // quantized per token to int8 (one scale per token row, INT8_PC's layout again), so a row's dot is
  // one integer sum and one float product; SmoothQuant's target format.
  W8A8 = 1008,
  // INT3 / INT2 per group of G (64, 128), asymmetric (GPTQ's and AWQ's zero-point grids): per group
  // an F16 scale d, an F16 min m, the low 2 bits of every level (G/4 bytes) and for INT3 the high
  // bits (G/8 bytes); x = d * q + m, q in [0, 7] / [0, 3]. Bit order in quant/blocks.h.
  INT3_ASYM_G64 = 1009,
  INT3_ASYM_G128 = 1010,
  INT2_ASYM_G64 = 1011,
  INT2_ASYM_G128 = 1012,
  // NF4 (QLoRA's NormalFloat, bitsandbytes' quant_type "nf4", blocksize 64): per block of 64 an F16
  // absmax d and 32 bytes of 4-bit indices into 16 normal-quantile levels in [-1, 1]; x = d * level.
  // Levels and nibble order in quant/blocks.h; activations Q8_0.
  NF4 = 1013,
  // INT4 per group with an integer zero point, as GPTQ, AWQ and compressed-tensors store it:
  // x = s * (q - z), q in [0, 15], z in [0, 255] (GPTQ v1 can give 16). Per group a 32-bit word holding the scale s as F32 bits
  // whose low 8 bits carry z (an F16 or BF16 scale widened to F32 leaves them 0, so s and z are
  // both exact), then G/2 bytes of nibbles in INT4_ASYM's order. Loaded pre-quantized checkpoints
  // dequantize to exactly the reference's values.
  INT4_ZP_G32 = 1014,
  INT4_ZP_G64 = 1015,
  INT4_ZP_G128 = 1016,
  // IQ3_S's values as 4-bit levels (an in-memory compute encoding, not a file format): IQ3_S's
  // values are odd multiples -15 .. 15 of its sub-block step d (2 s + 1), so a level n in [0, 15]
  // stands for 2 n - 15 and no grid lookup is needed. Per 256: IQ3_S's F16 d and 4 bytes of scale
  // codes, then 128 bytes of nibbles; x = d (2 s + 1) (2 n - 15), bitwise IQ3_S's dequantized value.
  // The model re-encodes IQ3_S matrices in it at load where the CPU kernels are faster with it
  // (backend.h: cpu_compute_encoding).
  IQ3_S_L4 = 1017,
};

// Storage layout of a type: a row of n elements is `row_header_bytes` (per-row data such as a
// per-channel scale; 0 for every GGML type) followed by n / block_size blocks of `block_bytes`.
struct DTypeLayout {
  std::string_view name;
  int64_t block_size;
  int64_t block_bytes;
  int64_t row_header_bytes;
};

// Layout of a known type id, or nullopt for ids GGUF does not define (or that were removed).
std::optional<DTypeLayout> dtype_layout(uint32_t type_id);
DTypeLayout dtype_layout(DType type);
std::string_view dtype_name(DType type);
// Parses a type name such as "Q8_0" or "f16" (case-insensitive).
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes taken by a row of `n` elements; n must be a multiple of the block size.
inline int64_t layout_row_bytes(const DTypeLayout& layout, int64_t n) {
  return layout.row_header_bytes + n / layout.block_size * layout.block_bytes;
}
inline int64_t dtype_row_bytes(DType type, int64_t n) {
  return layout_row_bytes(dtype_layout(type), n);
}

// True for Kestrel's own formats (ids >= 1000), which GGML does not know.
inline bool is_kestrel_dtype(DType type) { return uint32_t(type) >= 1000; }

}  // namespace kestrel
