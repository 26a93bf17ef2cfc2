// GPTQ on Mixture-of-Experts layers, on the tiny random fixtures tests/data/arch/qwen2_moe (4
// experts top-2, a shared expert with a sigmoid gate) and tests/data/arch/mixtral (4 experts top-2),
// calibrated on 8 chunks of 64 tokens of TinyStories' first 20 kB, evaluated on its last 300 kB:
// - each expert of a stack is quantized with the Hessian of the tokens routed to it: a stack's
//   report counts every (token, choice) pair once, and its output error (the proxy loss summed
//   over the experts) is below round to nearest's on the same inputs;
// - the model computes with the encoded stacks from the layer on (the next layers' inputs are the
//   quantized model's, as for dense layers);
// - the written file diverges less from the F32 fixture than the round-to-nearest file
//   (`kestrel eval`; measured 0.85x and 0.90x of RTN's mean KLD).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_process.h"
#include "core/error.h"
#include "engine/gptq_calibration.h"
#include "model/model.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

constexpr int64_t kChunks = 8, kCtx = 64;

std::string text_part(const std::string& name, bool head, size_t bytes) {
  const std::string text = test::read_file(test::shared_model_path("text/tinystories_val.txt"));
  const std::string path = test::scratch_dir("gptq_moe_" + name) + "/" + name;
  std::ofstream(path, std::ios::binary) << (head ? text.substr(0, bytes) : text.substr(text.size() - bytes));
  return path;
}

double mean_kld(const std::string& base, const std::string& candidate, const std::string& eval_text) {
  const auto r = test::run_kestrel("eval " + base + " " + candidate + " -f " + eval_text + " -c 64 --chunks 40 --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const size_t brace = r.out.rfind("\n{");
  return nlohmann::json::parse(r.out.substr(brace == std::string::npos ? 0 : brace + 1)).at("kld_mean").get<double>();
}

class GptqMoe : public testing::TestWithParam<std::string> {};

TEST_P(GptqMoe, QuantizesEachExpertWithItsTokensAndDivergesLessThanRoundToNearest) {
  const std::string fixture = test::test_data_path("arch/" + GetParam() + "/model.gguf");
  const std::string calib = text_part("calib.txt", true, 20000), eval = text_part("eval.txt", false, 300000);

  auto model = Model::load(fixture);
  const int64_t k = model->config().moe.n_expert_used;
  std::map<std::string, DType> targets;
  for (const auto& t : model->file().tensors()) {
    if (model->can_replace_matrix(t.name) && t.name.starts_with("blk.")) targets[t.name] = DType::INT4_ASYM_G32;
  }
  ASSERT_TRUE(targets.count("blk.0.ffn_gate_exps.weight")) << "the stacks are targets";
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  const auto tokens = tokenizer->encode(test::read_file(calib), false, false);
  GptqCalibrationOptions options;
  options.pass.n_ctx = kCtx;
  options.pass.n_chunks = kChunks;
  std::vector<GptqTensorReport> reports;
  const auto encoded =
      gptq_quantize_model(*model, tokens, targets, options, [&](const GptqTensorReport& r) { reports.push_back(r); });
  ASSERT_EQ(encoded.size(), targets.size());
  int stacks = 0;
  for (const auto& r : reports) {
    EXPECT_LT(r.stats.proxy_loss, 0.9 * r.stats.proxy_loss_baseline) << r.name;
    if (r.name.find("_exps.") == std::string::npos) continue;
    ++stacks;
    EXPECT_EQ(r.experts, model->config().moe.n_expert) << r.name;
    EXPECT_EQ(r.samples, kChunks * kCtx * k) << r.name << ": every token's k choices, each in one expert's Hessian";
  }
  EXPECT_EQ(stacks, 3 * int(model->config().n_layer)) << "gate, up and down of every layer";
  // The model computes with the encoded stacks.
  const MoeLayerWeights& moe = model->weights().layers[1].moe;
  EXPECT_EQ(moe.gate_stack.data, encoded.at("blk.1.ffn_gate_exps.weight").bytes.data());
  EXPECT_EQ(moe.down_stack.data, encoded.at("blk.1.ffn_down_exps.weight").bytes.data());
  EXPECT_EQ(moe.down_stack.type, DType::INT4_ASYM_G32);

  // The CLI's files: GPTQ's against round to nearest's, both against the F32 fixture.
  const std::string dir = test::scratch_dir("gptq_moe_" + GetParam());
  const std::string gptq_path = dir + "/gptq.gguf", rtn_path = dir + "/rtn.gguf";
  const auto g = test::run_kestrel("quantize " + fixture + " " + gptq_path + " INT4_ASYM_G32 --method gptq --calib " +
                                   calib + " --calib-chunks 8 --calib-ctx 64");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_NE(g.err.find("ffn_down_exps.weight"), std::string::npos) << g.err;
  const auto r = test::run_kestrel("quantize " + fixture + " " + rtn_path + " INT4_ASYM_G32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const double gptq_kld = mean_kld(fixture, gptq_path, eval), rtn_kld = mean_kld(fixture, rtn_path, eval);
  EXPECT_LT(gptq_kld, 0.95 * rtn_kld) << "GPTQ " << gptq_kld << " RTN " << rtn_kld;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GptqMoe, testing::Values("qwen2_moe", "mixtral"),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace kestrel
