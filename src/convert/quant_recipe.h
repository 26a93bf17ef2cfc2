// What `kestrel quantize` stores each tensor as. A recipe is either one type for every matrix
// ("Q8_0", "Q4_K", "INT4_SYM_G64", ...) or one of llama.cpp's k-quant mixtures ("Q4_K_M": Q4_K for
// most matrices, Q6_K for the output projection and for attn_v / ffn_down in the layers llama.cpp
// gives more bits), chosen tensor by tensor with llama.cpp's rules (src/llama-quant.cpp):
//
//   - Only tensors of 2+ dimensions whose name ends in "weight" (and is not a norm or an expert
//     gate) are quantized; 1-D tensors are stored as F32, other tensors keep their type.
//   - Mixtures: output.weight, and token_embd.weight when the model has no output.weight (tied
//     embeddings), take Q6_K (Q8_0 if rows are not a multiple of 256). attn_v, attn_qkv and
//     attn_kv_b tensors are counted in llama.cpp's order (by layer number, then name) and the i-th
//     of n takes Q6_K under Q4_K_M / Q5_K_M when use_more_bits(i, n):
//         i < n/8  or  i >= 7n/8  or  (i - n/8) % 3 == 2
//     and Q5_K under Q4_K_S when i < 4. ffn_down tensors likewise, with n = the model's
//     block_count: Q6_K under Q4_K_M / Q5_K_M when use_more_bits(i, n), Q5_K under Q4_K_S when
//     i < n/8. Every other matrix takes the mixture's base type.
//   - Q3_K_M: attn_v Q5_K for the first two then Q4_K, ffn_down Q5_K for i < n/16 then Q4_K,
//     attn_output Q4_K; Q3_K_L: those three Q5_K. Q2_K: attn_v Q4_K when n_gqa >= 4 else Q3_K,
//     ffn_down and attn_output Q3_K; Q2_K_S (llama.cpp requires an importance matrix for it):
//     attn_v Q4_K when n_gqa >= 4, ffn_down Q4_K for i < n/8, the rest Q2_K. "Q2_K_PURE" is Q2_K
//     for every matrix (llama-quantize --pure Q2_K; file type 10).
//   - Not modelled: llama.cpp's special cases for Falcon, 70B models (attn_v to Q5_K) and
//     mixtures of experts (n_expert == 8); imatrix-driven choices; --pure / --tensor-type flags;
//     the IQ4_NL / IQ4_XS file types' own choices (output.weight Q6_K, attn_v Q5_K when n_gqa >=
//     4, the first n/8 ffn_down Q5_K without an imatrix) and the IQ3 ones': "IQ4_NL", "IQ4_XS",
//     "IQ3_XXS" and "IQ3_S" here are pure, as after llama-quantize --pure. So are "IQ2_XXS",
//     "IQ2_XS", "IQ2_S", "IQ1_S" and "IQ1_M" (GGML's types; file types 19, 20, 29, 24, 31, as
//     llama-quantize --pure writes them: its IQ2_S file type is IQ2_XS-based, IQ2_M is IQ2_S-based).
//   - embedding_type / output_type, when set, override all of the above for those two tensors.
//   - A tensor whose rows do not divide into the chosen type's blocks falls back as llama.cpp's
//     tensor_type_fallback does: Q2_K and Q3_K to Q4_0, Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, IQ4_XS / IQ3_XXS /
//     IQ3_S / IQ2_* / IQ1_* / NF4 to IQ4_NL, TQ1_0 and TQ2_0 to Q4_0 when rows are a multiple of 32, else F16; INT4 group types to the same kind with a smaller group that fits, else
//     F16; every other type to F16.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace kestrel {

enum class QuantMix { Pure, Q2_K, Q2_K_S, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M };

struct QuantRecipe {
  std::string_view name;  // as typed on the command line, e.g. "Q4_K_M"
  DType base;             // the type most matrices take
  QuantMix mix;
  // general.file_type: llama.cpp's LLAMA_FTYPE (Q4_K_M = 15, ...). A pure Q4_K / Q5_K file is
  // written as 15 / 17, as `llama-quantize --pure Q4_K_M` does; Kestrel's own types, which
  // llama.cpp has no value for, write their DType id (1000 and up).
  uint32_t file_type;
  // llama-quantize's --token-embedding-type / --output-tensor-type: token_embd.weight and
  // output.weight (by name; a tied embedding is token_embd) take these when set.
  std::optional<DType> embedding_type = std::nullopt;
  std::optional<DType> output_type = std::nullopt;
  // Types for single tensors by name, applied last (`quantize ... auto`'s plan); not owned.
  const std::map<std::string, DType>* tensor_types = nullptr;
};

// The recipe for a name (case-insensitive), or nullopt.
std::optional<QuantRecipe> find_quant_recipe(std::string_view name);
// The recipe that stores every matrix as `type`; throws for types `kestrel quantize` cannot write.
QuantRecipe pure_quant_recipe(DType type);
// Every name find_quant_recipe accepts, comma separated (for help and error messages).
std::string quant_recipe_names();

struct QuantTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // innermost first: dims[0] is the row length
  DType type;                 // as stored in the input
};

struct QuantChoice {
  bool quantized;  // false: not a quantizable matrix; kept as is (1-D tensors become F32)
  DType wanted;    // what the recipe picked (== type when not quantized)
  DType type;      // what the tensor is stored as: wanted, or the fallback when rows do not fit
  bool fallback() const { return type != wanted; }
};

// One choice per tensor, in the order given. n_layer is the model's block_count, n_gqa its query
// heads per KV head (llama.cpp's n_gqa(); the Q2_K mixtures give attn_v more bits when >= 4).
std::vector<QuantChoice> plan_quantization(const QuantRecipe& recipe,
                                           std::span<const QuantTensorInfo> tensors,
                                           int64_t n_layer, int64_t n_gqa = 1);

// The types llama-quantize will not write without an importance matrix (IQ2_XXS, IQ2_XS, IQ2_S,
// IQ1_S, IQ1_M: at 1.5-2.5 bits an unweighted search wastes the few levels on unimportant columns).
bool requires_imatrix(DType type);

// `wanted` if rows of `row_length` divide into its blocks, else the fallback described above.
DType quant_type_that_fits(DType wanted, int64_t row_length);

}  // namespace kestrel
