// `kestrel imatrix` on Mixture-of-Experts models against llama-imatrix: the tiny random fixtures
// tests/data/arch/qwen2_moe (4 experts top-2, a shared expert with a sigmoid gate) and
// tests/data/arch/mixtral (`llama` with 4 experts top-2), 8 chunks of 64 tokens of wikitext-2;
// the reference files in tests/data/imatrix are llama-imatrix's (scripts/gen_imatrix_reference.sh).
// - The same entries: attention, the router (ffn_gate_inp), the expert stacks (ffn_*_exps, one
//   matrix per expert), the shared expert and its gate.
// - The same token counts, per expert: a token counts for each of the k experts it was routed to.
// - The same sums of squares within 1e-4 of each entry's largest (llama.cpp accumulates in float,
//   Kestrel in double; the activations agree to float rounding).
// - `kestrel quantize --imatrix` takes the file and writes each expert with its own importance.
// - llama-imatrix's legacy .dat file of a MoE model, and its file of a latent-attention model (one
//   count for a per-head 3-D tensor), fit the model's tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "cli_process.h"
#include "core/error.h"
#include "convert/imatrix_file.h"
#include "loader/gguf_reader.h"
#include "model/model.h"
#include "test_paths.h"

namespace kestrel {
namespace {

std::string calibration_text() { return test::text_excerpt("imatrix_moe_text", "text/wikitext-2-test.txt", 20000); }

// The same entries, the same counts, and sums of squares within 1e-4 of each entry's largest.
void expect_same_imatrix(const ImportanceMatrix& mine, const ImportanceMatrix& ref) {
  std::set<std::string> mine_names, ref_names;
  for (const auto& [name, e] : mine.entries) mine_names.insert(name);
  for (const auto& [name, e] : ref.entries) ref_names.insert(name);
  EXPECT_EQ(mine_names, ref_names);
  for (const auto& [name, r] : ref.entries) {
    const auto it = mine.entries.find(name);
    if (it == mine.entries.end()) continue;
    const ImatrixEntry& m = it->second;
    ASSERT_EQ(m.counts, r.counts) << name;
    ASSERT_EQ(m.sum2.size(), r.sum2.size()) << name;
    double largest = 0.0, worst = 0.0;
    for (size_t i = 0; i < r.sum2.size(); ++i) {
      largest = std::max(largest, std::fabs(r.sum2[i]));
      worst = std::max(worst, std::fabs(m.sum2[i] - r.sum2[i]));
    }
    EXPECT_LE(worst, 1e-4 * largest) << name;
  }
}

class ImatrixMoe : public testing::TestWithParam<std::string> {};

TEST_P(ImatrixMoe, EqualsLlamaImatrixExpertByExpert) {
  const std::string model_path = test::test_data_path("arch/" + GetParam() + "/model.gguf");
  const std::string out = test::scratch_dir("imatrix_moe_" + GetParam()) + "/imatrix.gguf";
  const auto run = test::run_kestrel("imatrix " + model_path + " -f " + calibration_text() +
                                     " -c 64 --chunks 8 -t 2 -o " + out);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const ImportanceMatrix mine = load_imatrix(out);
  const ImportanceMatrix ref = load_imatrix(test::test_data_path("imatrix/" + GetParam() + ".gguf"));

  expect_same_imatrix(mine, ref);
  EXPECT_TRUE(mine.entries.contains("blk.1.ffn_gate_inp.weight"));
  EXPECT_TRUE(mine.entries.contains("blk.1.ffn_down_exps.weight"));

  const auto model = Model::load(model_path);
  const int64_t n_expert = model->config().moe.n_expert, k = model->config().moe.n_expert_used;
  for (const auto& [name, m] : mine.entries) {
    if (name.find("_exps.") != std::string::npos) {
      // One matrix per expert; every token is counted by the k experts it chose.
      ASSERT_EQ(int64_t(m.counts.size()), n_expert) << name;
      int64_t routed = 0;
      for (const int64_t c : m.counts) routed += c;
      EXPECT_EQ(routed, 8 * 64 * k) << name;
    } else {
      EXPECT_EQ(m.counts, std::vector<int64_t>{8 * 64}) << name;
    }
  }

  // The file quantizes the experts, each with its own slice of importance.
  const std::string quantized = test::scratch_dir("imatrix_moe_q_" + GetParam()) + "/q.gguf";
  const auto q = test::run_kestrel("quantize " + model_path + " " + quantized + " IQ4_NL --imatrix " + out + " -t 2");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_NO_THROW(Model::load(quantized));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ImatrixMoe, testing::Values("qwen2_moe", "mixtral"),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

// llama.cpp's legacy .dat format keeps one call count per entry and stores each expert's mean x^2
// times it: fitted to the model, every expert gets that count, and its means equal the GGUF
// file's of the same llama-imatrix run (to float rounding).
TEST(ImatrixMoe, LegacyDatFileGivesEachExpertItsMeans) {
  const auto model = gguf::GgufFile::open(test::test_data_path("arch/qwen2_moe/model.gguf"));
  const ImportanceMatrix dat = fit_imatrix(load_imatrix(test::test_data_path("imatrix/qwen2_moe.dat")), *model, "dat");
  const ImportanceMatrix ref = fit_imatrix(load_imatrix(test::test_data_path("imatrix/qwen2_moe.gguf")), *model, "gguf");
  ASSERT_EQ(dat.entries.size(), ref.entries.size());
  for (const auto& [name, r] : ref.entries) {
    const ImatrixEntry& d = dat.entries.at(name);
    ASSERT_EQ(d.counts.size(), r.counts.size()) << name;
    for (size_t mat = 0; mat < r.counts.size(); ++mat) {
      const std::vector<float> a = d.mean(int64_t(mat)), b = r.mean(int64_t(mat));
      ASSERT_EQ(a.size(), b.size()) << name;
      for (size_t c = 0; c < a.size(); ++c) EXPECT_NEAR(a[c], b[c], 1e-5f * std::max(1.0f, b[c])) << name << " " << mat;
    }
  }
}

// Latent attention's per-head attn_k_b [16][24][4] and attn_v_b [24][12][4]: llama-imatrix stores
// one count for the 4 heads' 4 x 16 (4 x 24) values; fitted, each head's slice has that count.
// `kestrel imatrix` on the same file and text gives the fitted file's entries: q_a, q_b, kv_a_mqa,
// each head's q_nope into attn_k_b and attended latent into attn_v_b, attn_output, and the MoE
// layers' router, experts and shared experts.
TEST(ImatrixMoe, LatentAttentionEqualsLlamaImatrixHeadByHead) {
  const std::string model_path = test::test_data_path("arch/deepseek2/model.gguf");
  const std::string imatrix_path = test::test_data_path("imatrix/deepseek2.gguf");
  const auto model = gguf::GgufFile::open(model_path);
  const ImportanceMatrix raw = load_imatrix(imatrix_path);
  ASSERT_EQ(raw.entries.at("blk.1.attn_k_b.weight").counts, std::vector<int64_t>{512});
  const ImportanceMatrix fitted = fit_imatrix(raw, *model, "deepseek2.gguf");
  const ImatrixEntry& k_b = fitted.entries.at("blk.1.attn_k_b.weight");
  EXPECT_EQ(k_b.counts, std::vector<int64_t>(4, 512));
  EXPECT_EQ(k_b.n_in(), 16);
  EXPECT_EQ(fitted.entries.at("blk.1.attn_v_b.weight").n_in(), 24);
  EXPECT_EQ(fitted.entries.at("blk.1.ffn_gate_exps.weight").counts.size(), 4u);

  const std::string mine_path = test::scratch_dir("imatrix_mla") + "/imatrix.gguf";
  const auto run = test::run_kestrel("imatrix " + model_path + " -f " + calibration_text() + " -c 64 --chunks 8 -t 2 -o " +
                                     mine_path);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const ImportanceMatrix mine = fit_imatrix(load_imatrix(mine_path), *model, "kestrel");
  expect_same_imatrix(mine, fitted);

  const std::string out = test::scratch_dir("imatrix_mla_q") + "/q.gguf";
  const auto q = test::run_kestrel("quantize " + model_path + " " + out + " IQ4_NL --imatrix " + imatrix_path + " -t 2");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_NO_THROW(Model::load(out));
}

// Fitting by hand: one count over a 4-expert stack's 4 x 64 values is shared out; 3 matrices for a
// stack of 4 is an imatrix for another model, and the error says so with both numbers.
TEST(ImatrixMoe, FittingSharesOneCountAndRefusesAnotherExpertCount) {
  const auto model = gguf::GgufFile::open(test::test_data_path("arch/qwen2_moe/model.gguf"));
  ImportanceMatrix one_count;
  one_count.entries["blk.1.ffn_gate_exps.weight"] = {std::vector<double>(4 * 64, 2.0), {8}};
  const ImportanceMatrix fitted = fit_imatrix(one_count, *model, "one.gguf");
  EXPECT_EQ(fitted.entries.at("blk.1.ffn_gate_exps.weight").counts, std::vector<int64_t>(4, 8));
  EXPECT_EQ(fitted.entries.at("blk.1.ffn_gate_exps.weight").mean(3), std::vector<float>(64, 0.25f));
  ImportanceMatrix three;
  three.entries["blk.1.ffn_gate_exps.weight"] = {std::vector<double>(3 * 64, 1.0), {5, 5, 5}};
  try {
    fit_imatrix(three, *model, "three.gguf");
    ADD_FAILURE() << "accepted 3 experts' entry for a stack of 4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'blk.1.ffn_gate_exps.weight' holds 3 matrices, but"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("tensor has 4: an imatrix made for another model?"), std::string::npos)
        << e.what();
  }
}

// AWQ cannot calibrate experts or latent attention yet (GPTQ can: gptq_moe_test.cpp): clear errors
// before any work, naming the architecture and why (latent attention is checked first).
TEST(ImatrixMoe, WhatCalibrationCannotDoIsAClearError) {
  const std::string text = calibration_text();
  const std::string out = test::scratch_dir("imatrix_moe_refused") + "/out.gguf";
  const std::string moe = test::test_data_path("arch/qwen2_moe/model.gguf");
  const auto r = test::run_kestrel("quantize " + moe + " " + out + " INT4_ASYM_G32 --method awq --calib " + text +
                                   " --calib-chunks 2 --calib-ctx 64");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("does not support architecture 'qwen2moe' yet (Mixture-of-Experts layers)"), std::string::npos)
      << r.err;
  const auto mla = test::run_kestrel("quantize " + test::test_data_path("arch/deepseek2_lite/model.gguf") + " " + out +
                                     " INT4_ASYM_G32 --method awq --calib " + text + " --calib-chunks 2 --calib-ctx 64");
  EXPECT_NE(mla.exit_code, 0);
  EXPECT_NE(mla.err.find("does not support architecture 'deepseek2' yet (latent attention)"), std::string::npos)
      << mla.err;
}

TEST(ImatrixEntryMean, AnExpertNoTokenReachedWeighsEveryChannelAlike) {
  ImatrixEntry e;
  e.sum2 = {9.0, 9.0, 4.0, 16.0};  // two experts of two channels
  e.counts = {0, 4};
  EXPECT_EQ(e.mean(0), (std::vector<float>{1.0f, 1.0f})) << "llama-quantize's rule for a partial entry";
  EXPECT_EQ(e.mean(1), (std::vector<float>{1.0f, 4.0f}));
}

}  // namespace
}  // namespace kestrel
