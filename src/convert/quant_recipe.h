// What `kestrel quantize` stores each tensor as. A recipe is either one type for every matrix
// ("Q4_K", "INT4_SYM_G64", or any llama.cpp file type with --pure) or one of llama.cpp's mixtures,
// chosen tensor by tensor with the rules of llama-quantize (llama-cpp-python 0.3.36's
// src/llama-quant.cpp, llama_tensor_get_type_impl), ported rule by rule:
//
//   - Only tensors of 2+ dimensions whose name ends in "weight" (and is not a norm or an expert
//     router) are quantized; 1-D tensors are stored as F32, other tensors keep their type.
//   - Every llama-quantize file type Kestrel writes is a mixture: Q4_0, Q4_1, Q5_0, Q5_1, Q2_K,
//     Q2_K_S, Q3_K_S/M/L, Q4_K_S/M, Q5_K_S/M, Q6_K, IQ2_XXS, IQ2_XS, IQ2_S (IQ2_XS-based), IQ2_M (GGML's
//     IQ2_S), IQ1_S, IQ1_M, IQ3_XXS, IQ3_XS, IQ3_S, IQ3_M (IQ3_S-based), IQ4_NL, IQ4_XS, TQ1_0,
//     TQ2_0 and MXFP4_MOE; Q8_0 is one type throughout under llama.cpp's rules too.
//     The rules use: the output head (and a tied embedding) - Q6_K, Q5_K for the IQ1/IQ2/IQ3_XXS
//     types, Q8_0 where rows do not divide into the base type's blocks; the token embedding of
//     the low-bit types (Q2_K, IQ3_S, Q4_K); attn_v-like tensors (attn_v, attn_qkv, attn_kv_b),
//     counted in llama.cpp's order, by n_gqa, n_expert, use_more_bits(i, n):
//         i < n/8  or  i >= 7n/8  or  (i - n/8) % 3 == 2
//     and whether the model is what llama.cpp calls a 70B (80 layers of llama with GQA, or of
//     qwen2: attn_v Q3_K/Q4_K to Q5_K); attn_k / attn_q (IQ3_XS, IQ3_XXS; Q8_0 with 8 experts);
//     attn_output; ffn_down by layer (the layer in the name for mixtures of experts, a counter
//     otherwise; n = block_count); ffn_gate / ffn_up (IQ3_XS); and whether an importance matrix
//     is given (IQ3_XXS, IQ4_NL/IQ4_XS, Q4_0/Q5_0 choose differently with one).
//     tests/data/quant/recipe_types.txt holds what llama-quantize --dry-run chose for 7 synthetic
//     models x 30 file types x with/without an imatrix; the test compares every tensor.
//   - "Q2_K_PURE", "Q3_K", "Q4_K" and "Q5_K" are one type for every matrix (llama-quantize's
//     Q3_K/Q4_K/Q5_K are aliases of the _M mixtures; here they are the pure types), as are "MXFP4"
//     and Kestrel's own types (INT*, NF4, FP8, W8A8).
//   - Not modelled: the rules for architectures Kestrel does not run (Falcon, GLM5, BailingMoE3).
//   - embedding_type / output_type, when set, override all of the above for those two tensors;
//     then --tensor-type overrides (TensorTypeOverride); leave_output keeps output.weight as it is.
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

// The rule set of one of llama.cpp's file types (its LLAMA_FTYPE_MOSTLY_*), or Pure.
enum class QuantMix {
  Pure, Q4_0, Q4_1, Q5_0, Q5_1, Q6_K, Q2_K, Q2_K_S, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M,
  IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M, IQ1_S, IQ1_M, IQ3_XXS, IQ3_XS, IQ3_S, IQ3_M, IQ4_NL, IQ4_XS, TQ1_0,
  TQ2_0, MXFP4_MOE
};

// llama-quantize's --tensor-type PATTERN=TYPE: the first pattern found in a tensor's name
// (std::regex_search; patterns lower-cased, as llama.cpp does) gives its type, instead of the
// mixture's rules (whose counters then do not count it), with --pure too.
struct TensorTypeOverride {
  std::string pattern;
  DType type;
};

struct QuantRecipe {
  std::string_view name;  // as typed on the command line, e.g. "Q4_K_M"
  DType base;             // the type most matrices take
  QuantMix mix;           // Pure: base for every matrix (also llama-quantize --pure)
  // general.file_type: llama.cpp's LLAMA_FTYPE (Q4_K_M = 15, ...). A pure Q4_K / Q5_K file is
  // written as 15 / 17, as `llama-quantize --pure Q4_K_M` does; Kestrel's own types, which
  // llama.cpp has no value for, write their DType id (1000 and up).
  uint32_t file_type;
  // llama-quantize's --token-embedding-type / --output-tensor-type: token_embd.weight and
  // output.weight take these when set; under a mixture a tied token_embd without an
  // embedding_type takes output_type, as in llama.cpp.
  std::optional<DType> embedding_type = std::nullopt;
  std::optional<DType> output_type = std::nullopt;
  // Types for single tensors by name, applied last (`quantize ... auto`'s plan); not owned.
  const std::map<std::string, DType>* tensor_types = nullptr;
  // --tensor-type overrides, in order (only when the base type is quantized, as in llama.cpp); not owned.
  const std::vector<TensorTypeOverride>* overrides = nullptr;
  // --leave-output-tensor: output.weight keeps the input's type.
  bool leave_output = false;
  // An importance matrix is given (llama-quantize --imatrix): some mixtures choose differently.
  bool has_imatrix = false;
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

// What the mixtures' rules read from the model's metadata.
struct QuantModelInfo {
  std::string arch;       // general.architecture
  int64_t n_layer = 0;    // {arch}.block_count
  int64_t n_head = 1;     // {arch}.attention.head_count
  int64_t n_head_kv = 1;  // {arch}.attention.head_count_kv
  int64_t n_expert = 0;   // {arch}.expert_count (0: dense)
  int64_t n_gqa() const { return n_head_kv > 0 ? n_head / n_head_kv : 1; }
};

// One choice per tensor, in the order given.
std::vector<QuantChoice> plan_quantization(const QuantRecipe& recipe,
                                           std::span<const QuantTensorInfo> tensors,
                                           const QuantModelInfo& model);

// Throws, naming the pattern, when a --tensor-type pattern is not a regular expression.
void check_tensor_type_pattern(const std::string& pattern);

// Whether llama-quantize refuses to write this tensor as `type` without an importance matrix:
// IQ3_XXS, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M (at 1.5-3 bits an unweighted search wastes the
// few levels on unimportant columns), and Q2_K in a Q2_K_S file (also with --pure); never the
// token embedding or the output head.
bool requires_imatrix(const std::string& tensor_name, DType type, const QuantRecipe& recipe);

// `wanted` if rows of `row_length` divide into its blocks, else the fallback described above.
DType quant_type_that_fits(DType wanted, int64_t row_length);

}  // namespace kestrel
