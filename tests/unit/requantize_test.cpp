// `kestrel quantize` recipes and the re-encoding of GGUF files:
//  - the per-tensor types of all 30 llama-quantize file types Kestrel writes equal what
//    llama-quantize --dry-run chose for 7 synthetic models, with and without an imatrix, and with
//    its --tensor-type / --pure / --leave-output-tensor / --output-tensor-type options
//    (tests/data/quant/recipe_types.txt), and follow the documented use_more_bits rule for other
//    layer counts;
//  - fallbacks for rows that do not divide into blocks; metadata; determinism across thread
//    counts; Kestrel's own types end to end; error cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "convert/quant_recipe.h"
#include "convert/requantize.h"
#include "core/error.h"
#include "loader/gguf_reader.h"
#include "loader/gguf_writer.h"
#include "quant/format.h"
#include "test_paths.h"

namespace kestrel {
namespace {

// ---------------------------------------------------------------------------------------------
// Against llama-quantize

struct FixturePlan {
  std::string ftype;
  bool imatrix;
  std::vector<std::string> options;  // llama-quantize's, e.g. "--tensor-type=ffn_down=q5_k"
  std::vector<std::string> types;    // one per tensor of 2+ dimensions, in file order
};

struct FixtureModel {
  std::string name;
  QuantModelInfo info;
  std::vector<QuantTensorInfo> tensors;
  std::vector<FixturePlan> plans;
};

// tests/data/quant/recipe_types.txt (scripts/gen_recipe_fixture.py): llama-quantize --dry-run's
// choices; a run of one type is written TYPE*COUNT.
std::vector<FixtureModel> load_recipe_fixture() {
  std::ifstream in(test::test_data_path("quant/recipe_types.txt"));
  EXPECT_TRUE(in.good());
  std::vector<FixtureModel> models;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string kind;
    words >> kind;
    if (kind == "model") {
      FixtureModel& m = models.emplace_back();
      words >> m.name >> m.info.arch >> m.info.n_layer >> m.info.n_head >> m.info.n_head_kv >> m.info.n_expert;
    } else if (kind == "tensor") {
      QuantTensorInfo t{"", {}, DType::F32};
      words >> t.name;
      for (int64_t d; words >> d;) t.dims.push_back(d);
      models.back().tensors.push_back(t);
    } else if (kind == "plan") {
      FixturePlan& p = models.back().plans.emplace_back();
      std::string with;
      words >> p.ftype >> with;
      p.imatrix = with == "imatrix";
      for (std::string item; words >> item;) {
        if (item.starts_with("--")) {
          p.options.push_back(item);
          continue;
        }
        const size_t star = item.find('*');
        const int count = star == std::string::npos ? 1 : std::stoi(item.substr(star + 1));
        p.types.insert(p.types.end(), size_t(count), item.substr(0, star));
      }
    }
  }
  return models;
}

TEST(QuantRecipe, MixturesChooseWhatLlamaQuantizeChose) {
  const std::vector<FixtureModel> models = load_recipe_fixture();
  ASSERT_EQ(models.size(), 7u);
  int compared = 0, plans = 0;
  int with_options[2] = {0, 0};
  int unwritable = 0;
  std::set<std::string> ftypes;
  for (const FixtureModel& m : models) {
    for (const FixturePlan& p : m.plans) {
      std::optional<QuantRecipe> recipe = find_quant_recipe(p.ftype);
      ASSERT_TRUE(recipe) << p.ftype;
      recipe->has_imatrix = p.imatrix;
      std::vector<TensorTypeOverride> overrides;
      for (const std::string& option : p.options) {
        const size_t eq = option.find('=');
        const std::string name = option.substr(0, eq), value = eq == std::string::npos ? "" : option.substr(eq + 1);
        if (name == "--pure") {
          recipe->mix = QuantMix::Pure;
        } else if (name == "--leave-output-tensor") {
          recipe->leave_output = true;
        } else if (name == "--output-tensor-type") {
          recipe->output_type = *dtype_from_name(value);
        } else if (name == "--token-embedding-type") {
          recipe->embedding_type = *dtype_from_name(value);
        } else {
          ASSERT_EQ(name, "--tensor-type");
          const size_t sep = value.find('=');
          overrides.push_back({value.substr(0, sep), *dtype_from_name(value.substr(sep + 1))});
        }
      }
      recipe->overrides = &overrides;
      ++with_options[!p.options.empty()];
      const std::vector<QuantChoice> plan = plan_quantization(*recipe, m.tensors, m.info);
      size_t k = 0;
      for (size_t i = 0; i < m.tensors.size(); ++i) {
        const QuantTensorInfo& t = m.tensors[i];
        if (t.dims.size() < 2) {
          EXPECT_EQ(plan[i].type, DType::F32) << t.name;
          continue;
        }
        ASSERT_LT(k, p.types.size()) << m.name << " " << p.ftype;
        std::string expected = p.types[k++];
        // llama.cpp returns --token-embedding-type / --output-tensor-type as given, without its
        // fallback (its dry run lists Q4_K for rows of 384, which it could not write); Kestrel
        // falls back as for any other tensor.
        const DType given = *dtype_from_name(expected);
        if (t.dims[0] % dtype_layout(given).block_size != 0) {
          expected = dtype_name(quant_type_that_fits(given, t.dims[0]));
          ++unwritable;
        }
        EXPECT_EQ(dtype_name(plan[i].type), expected)
            << m.name << " " << p.ftype << (p.imatrix ? " imatrix " : " ") << t.name;
        ++compared;
      }
      EXPECT_EQ(k, p.types.size()) << m.name << " " << p.ftype;
      ++plans;
      ftypes.insert(p.ftype);
    }
  }
  EXPECT_EQ(ftypes.size(), 30u);
  EXPECT_EQ(with_options[0], 2 * (6 * 30 + 9));
  EXPECT_EQ(with_options[1], 2 * 6 * 4);  // 4 option sets on the models other than the 80-layer one
  EXPECT_EQ(unwritable, 2);  // llama4_w384's token_embd under --token-embedding-type q4_k
  std::printf("  %d tensor types in %d plans equal llama-quantize's\n", compared, plans);
}

// A Llama-shaped tensor list: n layers of 7 matrices and 2 norms, embeddings, optional output.
std::vector<QuantTensorInfo> llama_tensors(int n_layer, bool tied, int64_t width, int64_t ff) {
  std::vector<QuantTensorInfo> t;
  t.push_back({"token_embd.weight", {width, 32}, DType::F32});
  t.push_back({"output_norm.weight", {width}, DType::F32});
  if (!tied) t.push_back({"output.weight", {width, 32}, DType::F32});
  for (int i = 0; i < n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    t.push_back({b + "attn_norm.weight", {width}, DType::F32});
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up"}) {
      t.push_back({b + m + ".weight", {width, 8}, DType::F32});
    }
    t.push_back({b + "ffn_down.weight", {ff, 8}, DType::F32});
    t.push_back({b + "ffn_norm.weight", {width}, DType::F32});
  }
  return t;
}

// llama.cpp's use_more_bits, written out again here (see quant_recipe.h).
bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

TEST(QuantRecipe, FollowsTheUseMoreBitsRuleForAnyLayerCount) {
  for (int n : {1, 2, 3, 5, 8, 9, 22, 26, 32, 40, 80}) {
    for (bool tied : {false, true}) {
      const std::vector<QuantTensorInfo> tensors = llama_tensors(n, tied, 512, 1024);
      for (const char* name : {"Q4_K_M", "Q5_K_M", "Q4_K_S", "Q5_K_S"}) {
        const QuantRecipe recipe = *find_quant_recipe(name);
        const std::vector<QuantChoice> plan = plan_quantization(recipe, tensors, {.arch = "llama", .n_layer = n});
        for (size_t k = 0; k < tensors.size(); ++k) {
          const std::string& t = tensors[k].name;
          DType expected = tensors[k].dims.size() < 2 ? DType::F32 : recipe.base;
          int layer = -1;
          std::sscanf(t.c_str(), "blk.%d.", &layer);
          const bool m_mix = recipe.mix == QuantMix::Q4_K_M || recipe.mix == QuantMix::Q5_K_M;
          if (t == "output.weight" || (tied && t == "token_embd.weight")) expected = DType::Q6_K;
          if (t.find("attn_v") != std::string::npos) {
            if (m_mix && more_bits(layer, n)) expected = DType::Q6_K;
            if (recipe.mix == QuantMix::Q4_K_S && layer < 4) expected = DType::Q5_K;
          }
          if (t.find("ffn_down") != std::string::npos) {
            if (m_mix && more_bits(layer, n)) expected = DType::Q6_K;
            if (recipe.mix == QuantMix::Q4_K_S && layer < n / 8) expected = DType::Q5_K;
          }
          EXPECT_EQ(plan[k].type, expected) << name << " n_layer " << n << " " << t;
        }
      }
    }
  }
}

// llama.cpp's Q2_K and Q2_K_S rules (llama-quant.cpp), written out again: the fixture's models have
// n_gqa 1, so the n_gqa >= 4 branch is checked here.
TEST(QuantRecipe, Q2KMixturesFollowTheGqaRule) {
  for (int64_t n_gqa : {1, 2, 4, 8}) {
    for (const char* name : {"Q2_K", "Q2_K_S"}) {
      const int n = 16;
      const std::vector<QuantTensorInfo> tensors = llama_tensors(n, false, 512, 1024);
      const QuantRecipe recipe = *find_quant_recipe(name);
      const bool s_mix = recipe.mix == QuantMix::Q2_K_S;
      const std::vector<QuantChoice> plan =
          plan_quantization(recipe, tensors, {.arch = "llama", .n_layer = n, .n_head = n_gqa, .n_head_kv = 1});
      for (size_t k = 0; k < tensors.size(); ++k) {
        const std::string& t = tensors[k].name;
        if (tensors[k].dims.size() < 2) continue;
        int layer = -1;
        std::sscanf(t.c_str(), "blk.%d.", &layer);
        DType expected = DType::Q2_K;
        if (t == "output.weight") expected = DType::Q6_K;
        if (t.find("attn_v") != std::string::npos) {
          expected = n_gqa >= 4 ? DType::Q4_K : s_mix ? DType::Q2_K : DType::Q3_K;
        }
        if (t.find("attn_output") != std::string::npos && !s_mix) expected = DType::Q3_K;
        if (t.find("ffn_down") != std::string::npos) expected = !s_mix ? DType::Q3_K : layer < n / 8 ? DType::Q4_K : DType::Q2_K;
        EXPECT_EQ(plan[k].type, expected) << name << " n_gqa " << n_gqa << " " << t;
      }
    }
  }
  EXPECT_EQ(find_quant_recipe("Q2_K")->file_type, 10u);    // LLAMA_FTYPE_MOSTLY_Q2_K
  EXPECT_EQ(find_quant_recipe("Q2_K_S")->file_type, 21u);  // LLAMA_FTYPE_MOSTLY_Q2_K_S
  EXPECT_EQ(find_quant_recipe("Q2_K_PURE")->mix, QuantMix::Pure);
  EXPECT_EQ(quant_type_that_fits(DType::Q2_K, 96), DType::Q4_0);  // tensor_type_fallback
}

TEST(QuantRecipe, FallbacksForRowsThatDoNotFit) {
  // k-quants, as llama.cpp's tensor_type_fallback: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0 when
  // rows are a multiple of 32, else F16.
  EXPECT_EQ(quant_type_that_fits(DType::Q4_K, 512), DType::Q4_K);
  EXPECT_EQ(quant_type_that_fits(DType::Q4_K, 96), DType::Q5_0);
  EXPECT_EQ(quant_type_that_fits(DType::Q5_K, 896), DType::Q5_1);
  EXPECT_EQ(quant_type_that_fits(DType::Q6_K, 896), DType::Q8_0);
  EXPECT_EQ(quant_type_that_fits(DType::Q4_K, 100), DType::F16);
  EXPECT_EQ(quant_type_that_fits(DType::Q6_K, 100), DType::F16);
  EXPECT_EQ(quant_type_that_fits(DType::IQ4_XS, 768), DType::IQ4_XS);
  EXPECT_EQ(quant_type_that_fits(DType::IQ4_XS, 96), DType::IQ4_NL);
  EXPECT_EQ(quant_type_that_fits(DType::IQ4_XS, 100), DType::F16);
  EXPECT_EQ(quant_type_that_fits(DType::IQ4_NL, 96), DType::IQ4_NL);
  EXPECT_EQ(quant_type_that_fits(DType::IQ4_NL, 100), DType::F16);
  EXPECT_EQ(quant_type_that_fits(DType::TQ1_0, 96), DType::Q4_0);  // llama.cpp: TQ1_0, TQ2_0 -> Q4_0
  EXPECT_EQ(quant_type_that_fits(DType::TQ2_0, 256), DType::TQ2_0);
  EXPECT_EQ(quant_type_that_fits(DType::TQ2_0, 100), DType::F16);
  EXPECT_EQ(quant_type_that_fits(DType::MXFP4, 96), DType::MXFP4);
  // INT4 groups: the same kind with the largest group that fits, else F16.
  EXPECT_EQ(quant_type_that_fits(DType::INT4_SYM_G128, 192), DType::INT4_SYM_G64);
  EXPECT_EQ(quant_type_that_fits(DType::INT4_ASYM_G128, 96), DType::INT4_ASYM_G32);
  EXPECT_EQ(quant_type_that_fits(DType::INT4_ASYM_G64, 100), DType::F16);
  // INT3 / INT2: G128 -> G64 -> INT4 on groups of 32 -> F16.
  EXPECT_EQ(quant_type_that_fits(DType::INT3_ASYM_G128, 192), DType::INT3_ASYM_G64);
  EXPECT_EQ(quant_type_that_fits(DType::INT2_ASYM_G128, 128), DType::INT2_ASYM_G128);
  EXPECT_EQ(quant_type_that_fits(DType::INT2_ASYM_G128, 96), DType::INT4_ASYM_G32);
  EXPECT_EQ(quant_type_that_fits(DType::INT3_ASYM_G64, 100), DType::F16);
  EXPECT_EQ(quant_type_that_fits(DType::INT8_PC, 100), DType::F16);
  EXPECT_EQ(quant_type_that_fits(DType::FP8_E4M3_PC, 7), DType::FP8_E4M3_PC);
  // The existing single-type behaviour: Q8_0 / Q4_0 fall back to F16; 1-D tensors are F32.
  EXPECT_EQ(requantize_type_for(DType::Q8_0, 172, 2), DType::F16);
  EXPECT_EQ(requantize_type_for(DType::Q4_0, 64, 2), DType::Q4_0);
  EXPECT_EQ(requantize_type_for(DType::Q4_K, 96, 2), DType::Q5_0);
  EXPECT_EQ(requantize_type_for(DType::Q4_K, 96, 1), DType::F32);
  // A mixture's output.weight with rows not a multiple of 256 takes Q8_0 (then F16 if not 32).
  const auto plan = plan_quantization(*find_quant_recipe("Q4_K_M"), llama_tensors(4, false, 96, 96), {.arch = "llama", .n_layer = 4});
  EXPECT_EQ(plan[2].wanted, DType::Q8_0);
  EXPECT_FALSE(plan[2].fallback()) << "llama.cpp picks Q8_0 for this output; not a fallback";
  EXPECT_EQ(plan[0].type, DType::Q5_0) << "token_embd: Q4_K does not fit 96";
  EXPECT_TRUE(plan[0].fallback());
  // llama.cpp's fallback for Q3_K is Q4_0.
  const auto q3 = plan_quantization(*find_quant_recipe("Q3_K_S"), llama_tensors(4, false, 96, 96), {.arch = "llama", .n_layer = 4});
  EXPECT_EQ(q3[0].type, DType::Q4_0);
  EXPECT_TRUE(q3[0].fallback());
}

TEST(QuantRecipe, NamesAndFileTypes) {
  EXPECT_EQ(find_quant_recipe("q4_k_m")->file_type, 15u);
  EXPECT_EQ(find_quant_recipe("Q4_K_S")->file_type, 14u);
  EXPECT_EQ(find_quant_recipe("Q5_K_M")->file_type, 17u);
  EXPECT_EQ(find_quant_recipe("Q6_K")->file_type, 18u);
  EXPECT_EQ(find_quant_recipe("Q8_0")->file_type, 7u);
  EXPECT_EQ(find_quant_recipe("Q4_K")->mix, QuantMix::Pure);
  EXPECT_EQ(find_quant_recipe("INT4_SYM_G64")->file_type, uint32_t(DType::INT4_SYM_G64));
  EXPECT_EQ(find_quant_recipe("Q3_K_S")->file_type, 11u);
  EXPECT_EQ(find_quant_recipe("Q3_K_M")->file_type, 12u);
  EXPECT_EQ(find_quant_recipe("Q3_K_L")->file_type, 13u);
  EXPECT_EQ(find_quant_recipe("iq4_nl")->file_type, 25u);  // LLAMA_FTYPE_MOSTLY_IQ4_NL
  EXPECT_EQ(find_quant_recipe("IQ4_XS")->file_type, 30u);  // LLAMA_FTYPE_MOSTLY_IQ4_XS
  EXPECT_EQ(find_quant_recipe("IQ4_XS")->mix, QuantMix::IQ4_XS);
  // llama-quantize's names: IQ2_S is IQ2_XS-based (28), IQ2_M GGML's IQ2_S (29); IQ3_XS/IQ3_M IQ3_S.
  EXPECT_EQ(find_quant_recipe("IQ2_S")->base, DType::IQ2_XS);
  EXPECT_EQ(find_quant_recipe("IQ2_S")->file_type, 28u);
  EXPECT_EQ(find_quant_recipe("IQ2_M")->base, DType::IQ2_S);
  EXPECT_EQ(find_quant_recipe("IQ2_M")->file_type, 29u);
  EXPECT_EQ(find_quant_recipe("IQ3_XS")->base, DType::IQ3_S);
  EXPECT_EQ(find_quant_recipe("IQ3_M")->file_type, 27u);
  EXPECT_EQ(find_quant_recipe("MXFP4_MOE")->mix, QuantMix::MXFP4_MOE);
  // The pure recipe of a type keeps the file type of its first name.
  EXPECT_EQ(pure_quant_recipe(DType::IQ2_S).file_type, 29u);
  EXPECT_EQ(pure_quant_recipe(DType::IQ2_XS).file_type, 20u);
  EXPECT_EQ(pure_quant_recipe(DType::IQ3_S).file_type, 26u);
  EXPECT_EQ(pure_quant_recipe(DType::Q4_0).mix, QuantMix::Pure);
  EXPECT_EQ(pure_quant_recipe(DType::Q2_K).name, "Q2_K_PURE");
  EXPECT_EQ(find_quant_recipe("tq1_0")->file_type, 36u);  // LLAMA_FTYPE_MOSTLY_TQ1_0
  EXPECT_EQ(find_quant_recipe("TQ2_0")->file_type, 37u);  // LLAMA_FTYPE_MOSTLY_TQ2_0
  EXPECT_EQ(find_quant_recipe("MXFP4")->file_type, 38u);  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
  EXPECT_EQ(find_quant_recipe("MXFP4")->base, DType::MXFP4);
  EXPECT_FALSE(find_quant_recipe("Q8_K")) << "an activation type, not a weight type";
  EXPECT_FALSE(find_quant_recipe(""));
  EXPECT_THROW(pure_quant_recipe(DType::Q8_K), Error);
  EXPECT_NE(quant_recipe_names().find("Q4_K_M"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// End to end

std::vector<float> random_values(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<uint8_t> as_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A 16-layer model (rows of 256; ffn_down rows of 96) plus a matrix with rows of 100.
std::string write_model(const std::string& dir, std::map<std::string, std::vector<float>>* values) {
  std::mt19937 rng(17);
  gguf::GgufWriter writer;
  writer.set_string("general.architecture", "llama");
  writer.set_u32("llama.block_count", 16);
  writer.set_u32("general.file_type", 0);
  writer.set_string("general.name", "synthetic");
  std::vector<QuantTensorInfo> tensors = llama_tensors(16, false, 256, 96);
  tensors.push_back({"blk.3.odd.weight", {100, 2}, DType::F32});
  for (const QuantTensorInfo& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.dims) n *= d;
    (*values)[t.name] = random_values(rng, n);
    writer.add_tensor(t.name, DType::F32, t.dims, as_bytes((*values)[t.name]));
  }
  const std::string path = dir + "/model-f32.gguf";
  writer.write(path);
  return path;
}

std::vector<float> dequantize_tensor(const gguf::TensorInfo& t) {
  const quant::WeightFormat& f = quant::require_format(t.type);
  const int64_t n = t.dims[0], rows = t.num_elements / n, rb = quant::row_bytes(f, n);
  std::vector<float> out(static_cast<size_t>(t.num_elements));
  for (int64_t r = 0; r < rows; ++r) f.dequantize_row(t.data + r * rb, out.data() + r * n, n);
  return out;
}

double relative_rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, s = 0;
  for (size_t i = 0; i < a.size(); ++i) e += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), s += double(b[i]) * b[i];
  return std::sqrt(e / s);
}

// Relative RMS error allowed per stored type on normal data: Q4_K's ~0.07 measured, Q6_K ~0.017,
// Q8_0 ~0.005, each with margin; F16 and F32 are near exact.
double rmse_bound(DType t) {
  switch (t) {
    case DType::Q4_K: return 0.10;
    case DType::Q5_K: return 0.05;
    case DType::Q5_0: return 0.06;  // 5 bits symmetric over 32 values: ~0.04 on normal data
    case DType::Q6_K: return 0.025;
    case DType::Q8_0: return 0.01;
    case DType::F16: return 1e-3;
    // 4 bits over a group's range: ~range/15/sqrt(12); range ~4.1 sigma for 32, ~5.2 for 128.
    case DType::INT4_ASYM_G32: return 0.10;
    case DType::INT4_ASYM_G128: return 0.13;
    case DType::FP8_E4M3_PC: return 0.04;
    // 16 non-linear levels fitted per 32 values (measured: IQ4_NL ~0.08, IQ4_XS ~0.08).
    case DType::IQ4_NL: return 0.10;
    case DType::IQ4_XS: return 0.10;
    default: return 0.0;
  }
}

TEST(Requantize, Q4KMFileHasTheRecipeTypesMetadataAndAccurateValues) {
  const std::string dir = test::scratch_dir("requantize_q4km");
  std::map<std::string, std::vector<float>> values;
  const std::string input = write_model(dir, &values);
  std::vector<RequantizeNote> notes;
  requantize_gguf(input, dir + "/q4km.gguf", *find_quant_recipe("Q4_K_M"),
                  [&](const RequantizeNote& n) { notes.push_back(n); }, 2);

  const auto in = gguf::GgufFile::open(input);
  const auto out = gguf::GgufFile::open(dir + "/q4km.gguf");
  std::vector<QuantTensorInfo> infos;
  for (const auto& t : in->tensors()) infos.push_back({t.name, t.dims, t.type});
  const std::vector<QuantChoice> plan = plan_quantization(*find_quant_recipe("Q4_K_M"), infos, {.arch = "llama", .n_layer = 16});
  EXPECT_EQ(out->get_uint("general.file_type"), 15u);
  EXPECT_EQ(out->get_uint("general.quantization_version"), 2u);
  EXPECT_EQ(out->get_string("general.name"), "synthetic");
  ASSERT_EQ(out->tensors().size(), in->tensors().size());
  int fallbacks = 0, q6 = 0;
  for (size_t i = 0; i < infos.size(); ++i) {
    const gguf::TensorInfo& t = out->tensors()[i];
    EXPECT_EQ(t.name, infos[i].name) << "tensor order is kept";
    EXPECT_EQ(t.type, plan[i].type) << t.name;
    EXPECT_EQ(notes[i].to, t.type);
    if (notes[i].fallback) {
      ++fallbacks;
      EXPECT_TRUE(t.name.find("ffn_down") != std::string::npos || t.name == "blk.3.odd.weight") << t.name;
      // llama.cpp's fallbacks: Q4_K -> Q5_0, Q6_K -> Q8_0 (F16 for rows of 100).
      const DType fallback = notes[i].wanted == DType::Q6_K ? DType::Q8_0 : DType::Q5_0;
      EXPECT_EQ(t.type, t.name == "blk.3.odd.weight" ? DType::F16 : fallback) << t.name;
      EXPECT_TRUE(notes[i].wanted == DType::Q4_K || notes[i].wanted == DType::Q6_K);
    }
    q6 += t.type == DType::Q6_K;
    const double err = relative_rmse(dequantize_tensor(t), values[t.name]);
    EXPECT_LE(err, rmse_bound(t.type)) << t.name << " " << dtype_name(t.type);
  }
  EXPECT_EQ(fallbacks, 17) << "16 ffn_down (rows of 96) and the rows of 100";
  // use_more_bits(i, 16): i < 2, i >= 14, (i - 2) % 3 == 2 -> attn_v of layers 0 1 4 7 10 13 14 15
  // (ffn_down wanted Q6_K there too but its rows of 96 fell back to Q8_0; the others to Q5_0).
  EXPECT_EQ(q6, 1 + 8) << "output.weight and 8 attn_v";
}

TEST(Requantize, OutputDoesNotDependOnThreadCount) {
  const std::string dir = test::scratch_dir("requantize_threads");
  std::map<std::string, std::vector<float>> values;
  const std::string input = write_model(dir, &values);
  for (const char* type : {"Q4_K_M", "Q6_K", "INT4_ASYM_G128"}) {
    requantize_gguf(input, dir + "/one.gguf", *find_quant_recipe(type), [](const RequantizeNote&) {}, 1);
    requantize_gguf(input, dir + "/two.gguf", *find_quant_recipe(type), [](const RequantizeNote&) {}, 2);
    EXPECT_EQ(test::read_file(dir + "/one.gguf"), test::read_file(dir + "/two.gguf")) << type;
  }
}

TEST(Requantize, KestrelTypesEndToEnd) {
  const std::string dir = test::scratch_dir("requantize_kestrel");
  std::map<std::string, std::vector<float>> values;
  const std::string input = write_model(dir, &values);
  for (DType target : {DType::INT4_ASYM_G128, DType::FP8_E4M3_PC}) {
    const std::string path = dir + "/" + std::string(dtype_name(target)) + ".gguf";
    requantize_gguf(input, path, target, [](const RequantizeNote&) {});
    const auto out = gguf::GgufFile::open(path);
    EXPECT_EQ(out->get_uint("general.file_type"), uint32_t(target));
    for (const gguf::TensorInfo& t : out->tensors()) {
      if (t.dims.size() < 2) {
        EXPECT_EQ(t.type, DType::F32);
        continue;
      }
      const DType expected = target == DType::FP8_E4M3_PC ? target
                             : t.dims[0] == 256          ? target
                             : t.dims[0] == 96           ? DType::INT4_ASYM_G32
                                                         : DType::F16;
      EXPECT_EQ(t.type, expected) << t.name;
      EXPECT_EQ(t.num_bytes, uint64_t(dtype_row_bytes(t.type, t.dims[0]) * (t.num_elements / t.dims[0])));
      EXPECT_LE(relative_rmse(dequantize_tensor(t), values[t.name]), rmse_bound(t.type)) << t.name;
    }
  }
}

TEST(Requantize, Iq4XsEndToEnd) {
  // llama.cpp's file type 30; rows of 96 fall back to IQ4_NL (tensor_type_fallback), of 100 to F16.
  const std::string dir = test::scratch_dir("requantize_iq4");
  std::map<std::string, std::vector<float>> values;
  const std::string input = write_model(dir, &values);
  requantize_gguf(input, dir + "/iq4_xs.gguf", pure_quant_recipe(DType::IQ4_XS), [](const RequantizeNote&) {});
  const auto out = gguf::GgufFile::open(dir + "/iq4_xs.gguf");
  EXPECT_EQ(out->get_uint("general.file_type"), 30u);
  std::map<DType, double> worst;  // largest relative RMSE per type, printed
  for (const gguf::TensorInfo& t : out->tensors()) {
    if (t.dims.size() < 2) continue;
    const DType expected = t.dims[0] == 256 ? DType::IQ4_XS : t.dims[0] == 96 ? DType::IQ4_NL : DType::F16;
    EXPECT_EQ(t.type, expected) << t.name;
    EXPECT_EQ(t.num_bytes, uint64_t(dtype_row_bytes(t.type, t.dims[0]) * (t.num_elements / t.dims[0])));
    const double err = relative_rmse(dequantize_tensor(t), values[t.name]);
    EXPECT_LE(err, rmse_bound(t.type)) << t.name;
    worst[t.type] = std::max(worst[t.type], err);
  }
  EXPECT_EQ(worst.count(DType::IQ4_NL), 1u) << "the model has rows of 96";
  for (const auto& [type, err] : worst) std::printf("  %s: largest relative RMSE %.4f\n", std::string(dtype_name(type)).c_str(), err);
}

TEST(Requantize, TernaryAndMxfp4EndToEnd) {
  // `kestrel quantize IN OUT TQ1_0|TQ2_0|MXFP4`: llama.cpp's file types 36, 37, 38; rows of 96 fall
  // back to Q4_0 for the ternary types (tensor_type_fallback) and stay MXFP4 (blocks of 32).
  const std::string dir = test::scratch_dir("requantize_tq_mxfp4");
  std::map<std::string, std::vector<float>> values;
  const std::string input = write_model(dir, &values);
  for (const char* name : {"TQ1_0", "TQ2_0", "MXFP4"}) {
    QuantRecipe recipe = *find_quant_recipe(name);
    recipe.mix = QuantMix::Pure;  // --pure: the TQ file types' mixtures give the embedding and head other types
    const std::string path = dir + "/" + name + ".gguf";
    requantize_gguf(input, path, recipe, [](const RequantizeNote&) {});
    const auto out = gguf::GgufFile::open(path);
    EXPECT_EQ(out->get_uint("general.file_type"), recipe.file_type) << name;
    for (const gguf::TensorInfo& t : out->tensors()) {
      if (t.dims.size() < 2) continue;
      const bool ternary = recipe.base != DType::MXFP4;
      const DType expected = t.dims[0] == 256 ? recipe.base
                             : t.dims[0] == 96 ? (ternary ? DType::Q4_0 : DType::MXFP4)
                                               : DType::F16;
      EXPECT_EQ(t.type, expected) << name << " " << t.name;
      // Each row as the format's quantizer writes it: the stored values are its round trip.
      const quant::WeightFormat& f = quant::require_format(t.type);
      const std::vector<float>& x = values[t.name];
      std::vector<uint8_t> bytes(size_t(quant::row_bytes(f, t.dims[0])));
      std::vector<float> expect(x.size());
      for (int64_t r = 0; r < t.num_elements / t.dims[0]; ++r) {
        f.quantize_row(x.data() + r * t.dims[0], bytes.data(), t.dims[0]);
        f.dequantize_row(bytes.data(), expect.data() + r * t.dims[0], t.dims[0]);
      }
      EXPECT_EQ(dequantize_tensor(t), expect) << name << " " << t.name;
    }
  }
}

TEST(Requantize, ErrorCases) {
  const std::string dir = test::scratch_dir("requantize_errors");
  // A matrix stored in a type Kestrel cannot decode cannot be re-encoded.
  gguf::GgufWriter writer;
  writer.add_tensor("blk.0.attn_q.weight", DType::I32, {256, 2}, std::vector<uint8_t>(2 * 256 * 4));
  writer.write(dir + "/i32.gguf");
  try {
    requantize_gguf(dir + "/i32.gguf", dir + "/out.gguf", *find_quant_recipe("Q4_K_M"),
                    [](const RequantizeNote&) {});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.attn_q.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("I32"), std::string::npos) << e.what();
  }
  // ... but a tensor whose type stays the same is copied (Q4_K_M keeps non-"weight" tensors).
  gguf::GgufWriter keep;
  keep.add_tensor("rope_freqs", DType::IQ2_XXS, {256, 2}, std::vector<uint8_t>(2 * 66));
  keep.write(dir + "/keep.gguf");
  EXPECT_NO_THROW(requantize_gguf(dir + "/keep.gguf", dir + "/out.gguf", *find_quant_recipe("Q4_K_M"),
                                  [](const RequantizeNote&) {}));
  EXPECT_THROW(requantize_gguf(dir + "/missing.gguf", dir + "/out.gguf", DType::Q4_K,
                               [](const RequantizeNote&) {}),
               Error);
  EXPECT_THROW(requantize_gguf(dir + "/keep.gguf", dir + "/out.gguf", DType::I32,
                               [](const RequantizeNote&) {}),
               Error)
      << "I32 is not a weight format";
}

}  // namespace
}  // namespace kestrel
