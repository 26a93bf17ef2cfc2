// GCC 12 reports -Wmaybe-uninitialized inside libstdc++'s <regex> (std::function in its NFA
// states) at -O1 and above, a false positive of that compiler; placed before any include so the
// header's code is covered.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "convert/quant_recipe.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <numeric>
#include <regex>

#include "core/error.h"

namespace kestrel {
namespace {

// general.file_type values from llama.cpp's llama.h (LLAMA_FTYPE_*). pure_quant_recipe takes the
// first entry of a base type, so each type's pure entry comes before its mixtures.
constexpr QuantRecipe kRecipes[] = {
    {"F32", DType::F32, QuantMix::Pure, 0},
    {"F16", DType::F16, QuantMix::Pure, 1},
    {"BF16", DType::BF16, QuantMix::Pure, 32},
    {"Q8_0", DType::Q8_0, QuantMix::Pure, 7},  // llama.cpp's rules change nothing for Q8_0
    {"Q4_0", DType::Q4_0, QuantMix::Q4_0, 2},
    {"Q4_1", DType::Q4_1, QuantMix::Q4_1, 3},
    {"Q5_0", DType::Q5_0, QuantMix::Q5_0, 8},
    {"Q5_1", DType::Q5_1, QuantMix::Q5_1, 9},
    {"Q2_K_PURE", DType::Q2_K, QuantMix::Pure, 10},
    {"Q3_K", DType::Q3_K, QuantMix::Pure, 12},
    {"Q4_K", DType::Q4_K, QuantMix::Pure, 15},
    {"Q5_K", DType::Q5_K, QuantMix::Pure, 17},
    {"Q6_K", DType::Q6_K, QuantMix::Q6_K, 18},  // with 8 experts attn_k/attn_v take Q8_0
    {"IQ4_NL", DType::IQ4_NL, QuantMix::IQ4_NL, 25},
    {"IQ4_XS", DType::IQ4_XS, QuantMix::IQ4_XS, 30},
    {"TQ1_0", DType::TQ1_0, QuantMix::TQ1_0, 36},
    {"TQ2_0", DType::TQ2_0, QuantMix::TQ2_0, 37},
    {"MXFP4", DType::MXFP4, QuantMix::Pure, 38},  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE, as after --pure
    {"MXFP4_MOE", DType::MXFP4, QuantMix::MXFP4_MOE, 38},
    {"IQ3_XXS", DType::IQ3_XXS, QuantMix::IQ3_XXS, 23},
    {"IQ3_S", DType::IQ3_S, QuantMix::IQ3_S, 26},
    {"IQ3_XS", DType::IQ3_S, QuantMix::IQ3_XS, 22},
    {"IQ3_M", DType::IQ3_S, QuantMix::IQ3_M, 27},
    {"IQ2_XXS", DType::IQ2_XXS, QuantMix::IQ2_XXS, 19},
    {"IQ2_XS", DType::IQ2_XS, QuantMix::IQ2_XS, 20},
    {"IQ2_S", DType::IQ2_XS, QuantMix::IQ2_S, 28},  // llama.cpp's IQ2_S file type is IQ2_XS-based
    {"IQ2_M", DType::IQ2_S, QuantMix::IQ2_M, 29},   // and its IQ2_M is GGML's IQ2_S
    {"IQ1_S", DType::IQ1_S, QuantMix::IQ1_S, 24},
    {"IQ1_M", DType::IQ1_M, QuantMix::IQ1_M, 31},
    {"Q2_K", DType::Q2_K, QuantMix::Q2_K, 10},
    {"Q2_K_S", DType::Q2_K, QuantMix::Q2_K_S, 21},
    {"Q3_K_S", DType::Q3_K, QuantMix::Q3_K_S, 11},
    {"Q3_K_M", DType::Q3_K, QuantMix::Q3_K_M, 12},
    {"Q3_K_L", DType::Q3_K, QuantMix::Q3_K_L, 13},
    {"Q4_K_S", DType::Q4_K, QuantMix::Q4_K_S, 14},
    {"Q4_K_M", DType::Q4_K, QuantMix::Q4_K_M, 15},
    {"Q5_K_S", DType::Q5_K, QuantMix::Q5_K_S, 16},
    {"Q5_K_M", DType::Q5_K, QuantMix::Q5_K_M, 17},
    {"INT8_PC", DType::INT8_PC, QuantMix::Pure, uint32_t(DType::INT8_PC)},
    {"INT4_SYM_G32", DType::INT4_SYM_G32, QuantMix::Pure, uint32_t(DType::INT4_SYM_G32)},
    {"INT4_SYM_G64", DType::INT4_SYM_G64, QuantMix::Pure, uint32_t(DType::INT4_SYM_G64)},
    {"INT4_SYM_G128", DType::INT4_SYM_G128, QuantMix::Pure, uint32_t(DType::INT4_SYM_G128)},
    {"INT4_ASYM_G32", DType::INT4_ASYM_G32, QuantMix::Pure, uint32_t(DType::INT4_ASYM_G32)},
    {"INT4_ASYM_G64", DType::INT4_ASYM_G64, QuantMix::Pure, uint32_t(DType::INT4_ASYM_G64)},
    {"INT4_ASYM_G128", DType::INT4_ASYM_G128, QuantMix::Pure, uint32_t(DType::INT4_ASYM_G128)},
    {"INT3_ASYM_G64", DType::INT3_ASYM_G64, QuantMix::Pure, uint32_t(DType::INT3_ASYM_G64)},
    {"INT3_ASYM_G128", DType::INT3_ASYM_G128, QuantMix::Pure, uint32_t(DType::INT3_ASYM_G128)},
    {"INT2_ASYM_G64", DType::INT2_ASYM_G64, QuantMix::Pure, uint32_t(DType::INT2_ASYM_G64)},
    {"INT2_ASYM_G128", DType::INT2_ASYM_G128, QuantMix::Pure, uint32_t(DType::INT2_ASYM_G128)},
    {"NF4", DType::NF4, QuantMix::Pure, uint32_t(DType::NF4)},
    {"INT4_ZP_G32", DType::INT4_ZP_G32, QuantMix::Pure, uint32_t(DType::INT4_ZP_G32)},
    {"INT4_ZP_G64", DType::INT4_ZP_G64, QuantMix::Pure, uint32_t(DType::INT4_ZP_G64)},
    {"INT4_ZP_G128", DType::INT4_ZP_G128, QuantMix::Pure, uint32_t(DType::INT4_ZP_G128)},
    {"FP8_E4M3_PC", DType::FP8_E4M3_PC, QuantMix::Pure, uint32_t(DType::FP8_E4M3_PC)},
    {"W8A8", DType::W8A8, QuantMix::Pure, uint32_t(DType::W8A8)},
};

// llama.cpp's tensor categories (tensor_get_category), tested in its order by substring.
enum class Category { Output, TokenEmbd, AttnQkv, AttnKvB, AttnV, AttnK, AttnQ, AttnOutput, FfnUp, FfnGate, FfnDown, Other };

bool contains(std::string_view name, std::string_view part) {
  return name.find(part) != std::string_view::npos;
}

Category category_of(std::string_view name) {
  if (name == "output.weight") return Category::Output;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::TokenEmbd;
  if (contains(name, "attn_qkv.weight")) return Category::AttnQkv;
  if (contains(name, "attn_kv_b.weight")) return Category::AttnKvB;
  if (contains(name, "attn_v.weight")) return Category::AttnV;
  if (contains(name, "attn_k.weight")) return Category::AttnK;
  if (contains(name, "attn_q.weight")) return Category::AttnQ;
  if (contains(name, "attn_output.weight")) return Category::AttnOutput;
  if (contains(name, "ffn_up")) return Category::FfnUp;
  if (contains(name, "ffn_gate")) return Category::FfnGate;
  if (contains(name, "ffn_down")) return Category::FfnDown;
  return Category::Other;
}

// Tensors that llama.cpp counts as attention V (more sensitive to quantization).
bool is_attn_v(Category c) { return c == Category::AttnV || c == Category::AttnQkv || c == Category::AttnKvB; }

// llama.cpp quantizes only weights, and never norms, expert gates, position/token-type
// embeddings or these small tensors (the part of its list that applies to Kestrel's models).
bool allows_quantization(std::string_view name, size_t num_dims) {
  if (num_dims < 2 || !name.ends_with("weight")) return false;
  for (std::string_view excluded : {"_norm.weight", "ffn_gate_inp.weight", "position_embd.weight",
                                    "token_types.weight", "ssm_conv1d", "attn_rel_b.weight"}) {
    if (contains(name, excluded)) return false;
  }
  return true;
}

// The layer a tensor belongs to ("blk.N."), or -1.
int layer_of(const std::string& name) {
  int layer = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

bool use_more_bits(int64_t i, int64_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

// llama.cpp's LLM_TYPE_70B, the one model size its rules single out: 80 layers of llama with
// grouped-query attention (the 65B has none) or of qwen2.
bool is_70b(const QuantModelInfo& m) {
  if (m.n_layer != 80) return false;
  if (m.arch == "llama") return m.n_expert != 8 && m.n_head != m.n_head_kv;
  return m.arch == "qwen2";
}

// The counters llama-quantize keeps while it walks the tensors (quantize_state_impl).
struct MixtureState {
  int64_t n_attn_v = 0;
  int64_t i_attn_v = 0, i_ffn_down = 0, i_ffn_gate = 0, i_ffn_up = 0;
  bool tied_embeddings = false;
};

// The layer a ffn_down/gate/up rule looks at: for a mixture of experts the one in the name (its
// experts' tensors need not be one per layer), otherwise the count of such tensors so far.
int64_t rule_layer(const QuantTensorInfo& t, int64_t counter, const QuantModelInfo& m) {
  if (m.n_expert <= 1) return counter;
  int layer = -1;
  if (std::sscanf(t.name.c_str(), "blk.%d.", &layer) != 1) fail("failed to determine the layer of tensor '{}'", t.name);
  if (layer < 0 || layer >= m.n_layer) fail("tensor '{}' is in layer {}, outside the model's {} layers", t.name, layer, m.n_layer);
  return layer;
}

// llama_tensor_get_type_impl: the type a mixture gives tensor `t` of category `c`, from the file
// type's base type `type`. Branch for branch as llama.cpp has them (their order matters: the
// first that matches decides).
DType mixture_type(const QuantRecipe& recipe, DType type, const QuantTensorInfo& t, Category c, MixtureState& s,
                   const QuantModelInfo& m) {
  using M = QuantMix;
  const M f = recipe.mix;
  auto any = [f](std::initializer_list<M> mixes) { return std::find(mixes.begin(), mixes.end(), f) != mixes.end(); };
  const int64_t n_gqa = m.n_gqa(), n_expert = m.n_expert, n_layer = m.n_layer;
  const bool imatrix = recipe.has_imatrix;

  if (c == Category::Output || (s.tied_embeddings && c == Category::TokenEmbd)) {
    if (recipe.output_type) return *recipe.output_type;
    if (f == M::MXFP4_MOE || t.dims[0] % dtype_layout(type).block_size != 0) return DType::Q8_0;
    if (any({M::IQ2_XXS, M::IQ2_XS, M::IQ3_XXS, M::IQ1_S, M::IQ2_S, M::IQ2_M, M::IQ1_M})) return DType::Q5_K;
    return type != DType::Q8_0 ? DType::Q6_K : type;
  }
  if (f == M::MXFP4_MOE) {  // expert stacks (3-D) MXFP4, everything else Q8_0
    return t.dims.size() >= 3 && t.dims[2] > 1 ? DType::MXFP4 : DType::Q8_0;
  }
  if (c == Category::TokenEmbd) {
    if (any({M::IQ2_XXS, M::IQ2_XS, M::IQ1_S, M::IQ1_M})) return DType::Q2_K;
    if (any({M::IQ2_S, M::IQ2_M, M::IQ3_XXS})) return DType::IQ3_S;
    if (any({M::TQ1_0, M::TQ2_0})) return DType::Q4_K;
    return type;
  }
  if (any({M::IQ2_XXS, M::IQ2_XS, M::IQ1_S, M::IQ2_S, M::IQ2_M, M::IQ1_M})) {
    const bool iq2_sm = any({M::IQ2_S, M::IQ2_M});
    if (is_attn_v(c)) {
      ++s.i_attn_v;
      return n_gqa >= 4 || n_expert >= 4 ? DType::Q4_K : iq2_sm ? DType::IQ3_S : DType::Q2_K;
    }
    if (n_expert == 8 && c == Category::AttnK) return DType::Q4_K;
    if (c == Category::FfnDown) {
      const bool first = s.i_ffn_down++ < n_layer / 8;  // the counter, also for experts
      return first ? (iq2_sm ? DType::IQ3_S : DType::Q2_K) : type;
    }
    if (c == Category::AttnOutput) {
      if (n_expert == 8) return DType::Q5_K;
      if (any({M::IQ1_S, M::IQ1_M})) return DType::IQ2_XXS;
      if (iq2_sm) return DType::IQ3_S;
    }
    return type;
  }
  if (is_attn_v(c)) {
    if (f == M::Q2_K) {
      type = n_gqa >= 4 ? DType::Q4_K : DType::Q3_K;
    } else if (f == M::Q2_K_S && n_gqa >= 4) {
      type = DType::Q4_K;
    } else if (f == M::IQ3_XXS) {
      type = n_gqa >= 4 ? DType::Q4_K : !imatrix ? DType::IQ3_S : DType::IQ3_XXS;
    } else if (any({M::IQ3_XS, M::IQ3_S}) && n_gqa >= 4) {
      type = DType::Q4_K;
    } else if (f == M::IQ3_M) {
      type = DType::Q4_K;
    } else if (f == M::Q3_K_M) {
      type = s.i_attn_v < 2 ? DType::Q5_K : DType::Q4_K;
    } else if (f == M::Q3_K_L) {
      type = DType::Q5_K;
    } else if (any({M::IQ4_NL, M::IQ4_XS}) && n_gqa >= 4) {
      type = DType::Q5_K;
    } else if (any({M::Q4_K_M, M::Q5_K_M}) && use_more_bits(s.i_attn_v, s.n_attn_v)) {
      type = DType::Q6_K;
    } else if (f == M::Q4_K_S && s.i_attn_v < 4) {
      type = DType::Q5_K;
    }
    // 8 query heads share each V matrix, 8x smaller than attn_q: more bits cost little.
    if (is_70b(m) && (type == DType::Q3_K || type == DType::Q4_K)) type = DType::Q5_K;
    if (n_expert == 8) type = DType::Q8_0;
    ++s.i_attn_v;
    return type;
  }
  if (c == Category::AttnK) {
    if (n_expert == 8) return DType::Q8_0;
    if (f == M::IQ3_XS) return DType::IQ3_XXS;
    if (f == M::IQ3_XXS) return DType::IQ2_S;
    return type;
  }
  if (c == Category::AttnQ) {
    if (f == M::IQ3_XS) return DType::IQ3_XXS;
    if (f == M::IQ3_XXS) return DType::IQ2_S;
    return type;
  }
  if (c == Category::FfnDown) {
    const int64_t i = rule_layer(t, s.i_ffn_down++, m);
    if (f == M::Q2_K) return DType::Q3_K;
    if (f == M::Q2_K_S) return i < n_layer / 8 ? DType::Q4_K : type;
    if (f == M::IQ3_XXS && !imatrix) return i < n_layer / 8 ? DType::Q4_K : DType::Q3_K;
    if (f == M::Q3_K_M) return i < n_layer / 16 ? DType::Q5_K : DType::Q4_K;
    if (f == M::IQ3_M && (i < n_layer / 8 || (n_expert == 8 && use_more_bits(i, n_layer)))) return DType::Q4_K;
    if (f == M::Q3_K_L) return DType::Q5_K;
    if (f == M::Q4_K_M) return use_more_bits(i, n_layer) ? DType::Q6_K : type;
    if (i < n_layer / 8 && any({M::IQ4_NL, M::IQ4_XS}) && !imatrix) return DType::Q5_K;
    if (f == M::Q5_K_M && use_more_bits(i, n_layer)) return DType::Q6_K;
    if (f == M::Q4_K_S && i < n_layer / 8) return DType::Q5_K;
    // With an imatrix, the first ffn_down of Q4_0/Q5_0 take the offset variant (llama.cpp: "guard
    // against craziness" there).
    if (any({M::Q4_0, M::Q5_0}) && imatrix && i < n_layer / 8) return f == M::Q4_0 ? DType::Q4_1 : DType::Q5_1;
    return type;
  }
  if (c == Category::AttnOutput) {
    if (n_expert == 8) {
      return any({M::Q2_K, M::IQ3_XS, M::IQ3_XXS, M::Q3_K_S, M::Q3_K_M, M::IQ4_NL, M::Q4_K_S, M::Q4_K_M, M::IQ3_S,
                  M::IQ3_M, M::IQ4_XS})
                 ? DType::Q5_K
                 : type;
    }
    if (f == M::Q2_K) return DType::Q3_K;
    if (f == M::IQ3_XXS) return DType::IQ3_S;
    if (f == M::Q3_K_M || f == M::IQ3_M) return DType::Q4_K;
    if (f == M::Q3_K_L) return DType::Q5_K;
    return type;
  }
  if (c == Category::FfnGate || c == Category::FfnUp) {
    const int64_t i = rule_layer(t, c == Category::FfnGate ? s.i_ffn_gate++ : s.i_ffn_up++, m);
    if (f == M::IQ3_XS && i >= n_layer / 8 && i < 7 * n_layer / 8) return DType::IQ3_XXS;
  }
  return type;
}

// Kestrel's per-group formats: the same bits on smaller groups; INT3/INT2 G64 rows that are not a
// multiple of 64 take INT4 on groups of 32 (the closest smaller grid that fits).
DType smaller_int_group(DType type) {
  switch (type) {
    case DType::INT3_ASYM_G128: return DType::INT3_ASYM_G64;
    case DType::INT2_ASYM_G128: return DType::INT2_ASYM_G64;
    case DType::INT3_ASYM_G64:
    case DType::INT2_ASYM_G64: return DType::INT4_ASYM_G32;
    case DType::INT4_SYM_G128: return DType::INT4_SYM_G64;
    case DType::INT4_SYM_G64: return DType::INT4_SYM_G32;
    case DType::INT4_ASYM_G128: return DType::INT4_ASYM_G64;
    case DType::INT4_ASYM_G64: return DType::INT4_ASYM_G32;
    case DType::INT4_ZP_G128: return DType::INT4_ZP_G64;
    case DType::INT4_ZP_G64: return DType::INT4_ZP_G32;
    default: return DType::F16;
  }
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// A --tensor-type pattern, lower-cased (as llama.cpp does) and compiled.
std::regex tensor_type_pattern(const std::string& pattern) {
  std::string lower = pattern;
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  try {
    return std::regex(lower);
  } catch (const std::regex_error& e) {
    fail("--tensor-type {}: not a regular expression ({})", pattern, e.what());
  }
}

}  // namespace

std::optional<QuantRecipe> find_quant_recipe(std::string_view name) {
  const std::string wanted = upper(name);
  for (const QuantRecipe& recipe : kRecipes) {
    if (recipe.name == wanted) return recipe;
  }
  return std::nullopt;
}

QuantRecipe pure_quant_recipe(DType type) {
  for (QuantRecipe recipe : kRecipes) {
    if (recipe.base != type) continue;
    recipe.mix = QuantMix::Pure;
    return recipe;
  }
  fail("cannot quantize to {} (choose one of: {})", dtype_name(type), quant_recipe_names());
}

std::string quant_recipe_names() {
  std::string names;
  for (const QuantRecipe& recipe : kRecipes) {
    if (!names.empty()) names += ", ";
    names += recipe.name;
  }
  return names;
}

void check_tensor_type_pattern(const std::string& pattern) { tensor_type_pattern(pattern); }


bool requires_imatrix(const std::string& tensor_name, DType type, const QuantRecipe& recipe) {
  if (tensor_name == "token_embd.weight" || tensor_name == "per_layer_token_embd.weight" || tensor_name == "output.weight") {
    return false;
  }
  switch (type) {
    case DType::IQ3_XXS:
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ1_S:
    case DType::IQ1_M: return true;
    case DType::Q2_K: return recipe.file_type == 21;  // LLAMA_FTYPE_MOSTLY_Q2_K_S, also with --pure
    default: return false;
  }
}

DType quant_type_that_fits(DType wanted, int64_t row_length) {
  for (DType type = wanted;; type = smaller_int_group(type)) {
    if (row_length % dtype_layout(type).block_size == 0) return type;
    // llama.cpp's tensor_type_fallback: each k-quant to the 32-block type of about its precision.
    const DType smaller = type == DType::Q3_K || type == DType::Q2_K ? DType::Q4_0 : type == DType::Q4_K ? DType::Q5_0
                        : type == DType::Q5_K ? DType::Q5_1 : type == DType::Q6_K ? DType::Q8_0
                        : type == DType::IQ4_XS || type == DType::IQ3_XXS || type == DType::IQ3_S || type == DType::IQ2_XXS ||
                                  type == DType::IQ2_XS || type == DType::IQ2_S || type == DType::IQ1_S ||
                                  type == DType::IQ1_M || type == DType::NF4
                            ? DType::IQ4_NL
                        : type == DType::TQ1_0 || type == DType::TQ2_0 ? DType::Q4_0 : DType::F16;
    if (smaller != DType::F16) return row_length % 32 == 0 ? smaller : DType::F16;
  }
}

std::vector<QuantChoice> plan_quantization(const QuantRecipe& recipe,
                                           std::span<const QuantTensorInfo> tensors,
                                           const QuantModelInfo& model) {
  MixtureState state;
  state.tied_embeddings = std::none_of(tensors.begin(), tensors.end(), [](const auto& t) {
    return t.name == "output.weight";
  });
  state.n_attn_v = std::count_if(tensors.begin(), tensors.end(), [](const auto& t) {
    return is_attn_v(category_of(t.name));
  });
  // llama.cpp visits tensors ordered by layer number (non-layer tensors first), then by name; the
  // attn_v and ffn counters follow that order.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int la = layer_of(tensors[a].name), lb = layer_of(tensors[b].name);
    return la != lb ? la < lb : tensors[a].name < tensors[b].name;
  });

  // llama.cpp applies --tensor-type only when the file type's base is quantized.
  std::vector<std::pair<std::regex, DType>> overrides;
  const bool base_quantized = recipe.base != DType::F32 && recipe.base != DType::F16 && recipe.base != DType::BF16;
  if (recipe.overrides != nullptr && base_quantized) {
    for (const TensorTypeOverride& o : *recipe.overrides) overrides.emplace_back(tensor_type_pattern(o.pattern), o.type);
  }

  std::vector<QuantChoice> choices(tensors.size());
  for (size_t index : order) {
    const QuantTensorInfo& t = tensors[index];
    const bool integer = t.type == DType::I8 || t.type == DType::I16 || t.type == DType::I32 || t.type == DType::I64;
    if (integer && t.dims.size() < 2) {  // indices (a matrix's input_order), not values: kept as they are
      choices[index] = {false, t.type, t.type};
      continue;
    }
    if (t.dims.size() < 2) {
      choices[index] = {false, DType::F32, DType::F32};
      continue;
    }
    if (!allows_quantization(t.name, t.dims.size()) || (recipe.leave_output && t.name == "output.weight")) {
      choices[index] = {false, t.type, t.type};
      continue;
    }
    DType wanted = recipe.base;
    const auto manual = std::find_if(overrides.begin(), overrides.end(),
                                     [&](const auto& o) { return std::regex_search(t.name, o.first); });
    if (recipe.embedding_type && t.name == "token_embd.weight") {
      wanted = *recipe.embedding_type;
    } else if (recipe.output_type && t.name == "output.weight") {
      wanted = *recipe.output_type;
    } else if (manual != overrides.end()) {
      wanted = manual->second;
    } else if (recipe.mix != QuantMix::Pure) {
      wanted = mixture_type(recipe, recipe.base, t, category_of(t.name), state, model);
    }
    if (recipe.tensor_types != nullptr) {
      const auto it = recipe.tensor_types->find(t.name);
      if (it != recipe.tensor_types->end()) wanted = it->second;
    }
    choices[index] = {true, wanted, quant_type_that_fits(wanted, t.dims[0])};
  }
  return choices;
}

}  // namespace kestrel
