#include "convert/quant_recipe.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <numeric>

#include "core/error.h"

namespace kestrel {
namespace {

// general.file_type values from llama.cpp's llama.h (LLAMA_FTYPE_*).
constexpr QuantRecipe kRecipes[] = {
    {"F32", DType::F32, QuantMix::Pure, 0},
    {"F16", DType::F16, QuantMix::Pure, 1},
    {"BF16", DType::BF16, QuantMix::Pure, 32},
    {"Q8_0", DType::Q8_0, QuantMix::Pure, 7},
    {"Q4_0", DType::Q4_0, QuantMix::Pure, 2},
    {"Q2_K_PURE", DType::Q2_K, QuantMix::Pure, 10},
    {"Q3_K", DType::Q3_K, QuantMix::Pure, 12},
    {"Q4_K", DType::Q4_K, QuantMix::Pure, 15},
    {"Q5_K", DType::Q5_K, QuantMix::Pure, 17},
    {"Q6_K", DType::Q6_K, QuantMix::Pure, 18},
    {"IQ4_NL", DType::IQ4_NL, QuantMix::Pure, 25},
    {"IQ4_XS", DType::IQ4_XS, QuantMix::Pure, 30},
    {"TQ1_0", DType::TQ1_0, QuantMix::Pure, 36},
    {"TQ2_0", DType::TQ2_0, QuantMix::Pure, 37},
    {"MXFP4", DType::MXFP4, QuantMix::Pure, 38},  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE, as after --pure
    {"IQ3_XXS", DType::IQ3_XXS, QuantMix::Pure, 23},
    {"IQ3_S", DType::IQ3_S, QuantMix::Pure, 26},
    {"IQ2_XXS", DType::IQ2_XXS, QuantMix::Pure, 19},
    {"IQ2_XS", DType::IQ2_XS, QuantMix::Pure, 20},
    {"IQ2_S", DType::IQ2_S, QuantMix::Pure, 29},  // LLAMA_FTYPE_MOSTLY_IQ2_M: its base type is GGML's IQ2_S
    {"IQ1_S", DType::IQ1_S, QuantMix::Pure, 24},
    {"IQ1_M", DType::IQ1_M, QuantMix::Pure, 31},
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

// llama.cpp's tensor categories, tested in its order (names are matched by substring).
enum class Category { Output, TokenEmbd, AttnV, AttnOutput, FfnDown, Other };

bool contains(std::string_view name, std::string_view part) {
  return name.find(part) != std::string_view::npos;
}

Category category_of(std::string_view name) {
  if (name == "output.weight") return Category::Output;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") {
    return Category::TokenEmbd;
  }
  if (contains(name, "attn_qkv.weight") || contains(name, "attn_kv_b.weight") ||
      contains(name, "attn_v.weight")) {
    return Category::AttnV;
  }
  if (contains(name, "attn_output.weight")) return Category::AttnOutput;
  if (contains(name, "attn_k.weight") || contains(name, "attn_q.weight") || contains(name, "ffn_up") ||
      contains(name, "ffn_gate")) {
    return Category::Other;
  }
  if (contains(name, "ffn_down")) return Category::FfnDown;
  return Category::Other;
}

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

}  // namespace

std::optional<QuantRecipe> find_quant_recipe(std::string_view name) {
  const std::string wanted = upper(name);
  for (const QuantRecipe& recipe : kRecipes) {
    if (recipe.name == wanted) return recipe;
  }
  return std::nullopt;
}

QuantRecipe pure_quant_recipe(DType type) {
  for (const QuantRecipe& recipe : kRecipes) {
    if (recipe.mix == QuantMix::Pure && recipe.base == type) return recipe;
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

bool requires_imatrix(DType type) {
  return type == DType::IQ2_XXS || type == DType::IQ2_XS || type == DType::IQ2_S || type == DType::IQ1_S ||
         type == DType::IQ1_M;
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
                                           int64_t n_layer, int64_t n_gqa) {
  const bool tied_embeddings = std::none_of(tensors.begin(), tensors.end(), [](const auto& t) {
    return t.name == "output.weight";
  });
  const int64_t n_attn_v = std::count_if(tensors.begin(), tensors.end(), [](const auto& t) {
    return category_of(t.name) == Category::AttnV;
  });
  // llama.cpp visits tensors ordered by layer number (non-layer tensors first), then by name; the
  // attn_v and ffn_down counters follow that order.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int la = layer_of(tensors[a].name), lb = layer_of(tensors[b].name);
    return la != lb ? la < lb : tensors[a].name < tensors[b].name;
  });

  std::vector<QuantChoice> choices(tensors.size());
  int64_t i_attn_v = 0, i_ffn_down = 0;
  const QuantMix mix = recipe.mix;
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
    if (!allows_quantization(t.name, t.dims.size())) {
      choices[index] = {false, t.type, t.type};
      continue;
    }
    DType wanted = recipe.base;
    if (mix != QuantMix::Pure) {
      const Category category = category_of(t.name);
      if (category == Category::Output || (tied_embeddings && category == Category::TokenEmbd)) {
        wanted = t.dims[0] % 256 != 0 ? DType::Q8_0 : DType::Q6_K;
      } else if (category == Category::AttnV) {
        if (mix == QuantMix::Q2_K) {
          wanted = n_gqa >= 4 ? DType::Q4_K : DType::Q3_K;
        } else if (mix == QuantMix::Q2_K_S && n_gqa >= 4) {
          wanted = DType::Q4_K;
        } else if (mix == QuantMix::Q3_K_M) {
          wanted = i_attn_v < 2 ? DType::Q5_K : DType::Q4_K;
        } else if (mix == QuantMix::Q3_K_L) {
          wanted = DType::Q5_K;
        } else if ((mix == QuantMix::Q4_K_M || mix == QuantMix::Q5_K_M) && use_more_bits(i_attn_v, n_attn_v)) {
          wanted = DType::Q6_K;
        } else if (mix == QuantMix::Q4_K_S && i_attn_v < 4) {
          wanted = DType::Q5_K;
        }
        ++i_attn_v;
      } else if (category == Category::AttnOutput) {
        if (mix == QuantMix::Q2_K) wanted = DType::Q3_K;
        if (mix == QuantMix::Q3_K_M) wanted = DType::Q4_K;
        if (mix == QuantMix::Q3_K_L) wanted = DType::Q5_K;
      } else if (category == Category::FfnDown) {
        if (mix == QuantMix::Q2_K) {
          wanted = DType::Q3_K;
        } else if (mix == QuantMix::Q2_K_S) {
          if (i_ffn_down < n_layer / 8) wanted = DType::Q4_K;
        } else if (mix == QuantMix::Q3_K_M) {
          wanted = i_ffn_down < n_layer / 16 ? DType::Q5_K : DType::Q4_K;
        } else if (mix == QuantMix::Q3_K_L) {
          wanted = DType::Q5_K;
        } else if ((mix == QuantMix::Q4_K_M || mix == QuantMix::Q5_K_M) && use_more_bits(i_ffn_down, n_layer)) {
          wanted = DType::Q6_K;
        } else if (mix == QuantMix::Q4_K_S && i_ffn_down < n_layer / 8) {
          wanted = DType::Q5_K;
        }
        ++i_ffn_down;
      }
    }
    if (recipe.embedding_type && t.name == "token_embd.weight") wanted = *recipe.embedding_type;
    if (recipe.output_type && t.name == "output.weight") wanted = *recipe.output_type;
    if (recipe.tensor_types != nullptr) {
      const auto it = recipe.tensor_types->find(t.name);
      if (it != recipe.tensor_types->end()) wanted = it->second;
    }
    choices[index] = {true, wanted, quant_type_that_fits(wanted, t.dims[0])};
  }
  return choices;
}

}  // namespace kestrel
