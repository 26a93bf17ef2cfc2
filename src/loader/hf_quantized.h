// Pre-quantized Hugging Face checkpoints, read as vLLM reads them: AutoGPTQ / GPTQModel (`qweight`,
// `qzeros`, `scales`, `g_idx`; 2/4/8-bit, any group size, act-order, the v1 zero-minus-one and the
// v2 zero conventions), AutoAWQ GEMM (4-bit, output-interleaved nibbles) and llm-compressor's
// compressed-tensors (`pack-quantized` INT4/INT8 groups or channels, symmetric or with zero points,
// act-order `weight_g_idx`; `float-quantized` FP8 E4M3 per tensor, channel or block).
//
// Each quantized linear becomes one Kestrel tensor that dequantizes to exactly the reference's
// values s * (q - z) (F32 arithmetic is exact for them):
//   4-bit and 2-bit levels -> INT4_ZP_G{128,64,32} (the largest block dividing the group; a group
//                             spanning several blocks repeats its scale word), scales F16/BF16
//   8-bit symmetric        -> Q8_0 when every scale is an F16 value (blocks of 32 repeat it)
//   FP8 per tensor/channel -> FP8_E4M3_PC (the E4M3 bytes as stored, the scale per row)
//   anything else          -> F32 (exact, 8x the bytes; named in kestrel.quantization.fallbacks)
// Act-order (a g_idx that is not column / group_size): the columns are sorted by group so groups
// are contiguous, and the matrix gets an I32 `input_order` tensor (WeightView::input_order) so the
// kernels read the input in that order.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "loader/gguf_reader.h"
#include "loader/safetensors.h"

namespace kestrel {

struct HfQuantization {
  enum class Method { None, Gptq, Awq, PackedInt, Fp8 };
  Method method = Method::None;
  int bits = 0;
  int64_t group_size = 0;      // 0: one group per row (per output channel)
  bool symmetric = true;
  bool gptq_v1_zeros = false;  // GPTQ "gptq" checkpoint format: stored zero = z - 1
  std::string strategy;        // compressed-tensors: "group", "channel", "tensor" or "block"
  int64_t block_rows = 0, block_cols = 0;  // compressed-tensors FP8 "block": block_structure
  std::string description;     // e.g. "GPTQ 4-bit, groups of 128, v1 zeros"
};

// The checkpoint's quantization_config (config.json, or quantize_config.json beside it);
// Method::None when it has none. Throws kestrel::Error naming the file for an unknown
// quant_method or format, or settings Kestrel does not read (GPTQ 3-bit, AWQ GEMV, ...).
HfQuantization parse_hf_quantization(const nlohmann::json& config, const std::string& folder);

struct QuantizedLinear {
  gguf::TensorInfo weight;                 // GGUF dims {cols, rows}; data in `owned`
  std::shared_ptr<std::vector<uint8_t>> owned;
  std::optional<gguf::TensorInfo> input_order;  // act-order: I32 [cols], data in `owned_order`
  std::shared_ptr<std::vector<uint8_t>> owned_order;
  std::string fallback;                    // why the weight is F32, or empty
};

// The name of a matrix's column-order tensor: "blk.0.attn_q.weight" -> "blk.0.attn_q.input_order"
// (I32 [cols]: column c of the matrix multiplies input input_order[c]).
std::string input_order_tensor_name(const std::string& matrix_name);

// Whether the checkpoint stores linear layer `module` quantized (its method's packed tensors, not
// a float ".weight"): for layers that may be absent, such as an untied head.
bool stores_quantized(const safetensors::SafetensorsModel& st, const HfQuantization& q, const std::string& module);

// The linear layer `module` (an HF module path such as "model.layers.0.self_attn.q_proj") of shape
// [rows][cols] as a Kestrel tensor named `gguf_name`, or nullopt when the checkpoint stores it
// unquantized (its ".weight" is a float tensor). `row_order`, if not empty, reorders the output
// rows (row r of the result is row row_order[r] of the checkpoint's: Llama's Q/K RoPE permutation).
// A missing or mis-shaped tensor is a kestrel::Error naming it and what was expected.
std::optional<QuantizedLinear> load_quantized_linear(const safetensors::SafetensorsModel& st, const HfQuantization& q,
                                                     const std::string& module, const std::string& gguf_name,
                                                     int64_t rows, int64_t cols, const std::vector<int64_t>& row_order,
                                                     const std::string& folder);

}  // namespace kestrel
