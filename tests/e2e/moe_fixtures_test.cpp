// Mixture-of-Experts models against transformers: the tiny random MoE fixtures of
// tests/data/arch/ (scripts/gen_arch_fixtures.py: Mixtral, Qwen2-MoE with its shared expert,
// Qwen3-MoE; 4 experts, 2 per token) as llama.cpp's converter writes them.
// - Logits of all prompts in one batch equal transformers' float32 logits within
//   1e-4 * max|logit| + 1e-4 (the argument of hf_models_test.cpp: float32 on both sides, only the
//   summation order differs; the fixtures keep every router's k-th and (k+1)-th probabilities
//   >= 1e-3 apart, so rounding cannot swap an expert, and a wrong normalization or a missing shared
//   expert moves logits by O(max|logit|)). Measured: at most 5.4e-7 of max|logit| (AVX2).
// - Greedy generation through the engine gives transformers' 16 tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "model/model.h"
#include "runner/model_runner.h"
#include "test_generate.h"
#include "test_paths.h"

namespace kestrel {
namespace {

using json = nlohmann::json;

std::string fixture_dir(const std::string& name) { return test::test_data_path("arch/" + name); }

const json& reference(const std::string& name) {
  static std::map<std::string, json> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    it = cache.emplace(name, json::parse(test::read_file(fixture_dir(name) + "/reference.json"))).first;
  }
  return it->second;
}

std::vector<TokenId> ids_of(const json& array) { return array.get<std::vector<TokenId>>(); }

class MoeFixture : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { model_ = Model::load(fixture_dir(GetParam()) + "/model.gguf"); }
  const json& ref() const { return reference(GetParam()); }
  std::unique_ptr<Model> model_;
};

TEST_P(MoeFixture, ConfigHasTheArchitecturesRouting) {
  const ModelConfig& c = model_->config();
  const std::string& name = GetParam();
  EXPECT_EQ(c.moe.n_expert, 4);
  EXPECT_EQ(c.moe.n_expert_used, 2);
  EXPECT_EQ(c.architecture, name == "mixtral" ? "llama" : name == "qwen2_moe" ? "qwen2moe" : "qwen3moe");
  EXPECT_EQ(c.moe.normalize_top_k, name != "qwen2_moe") << "norm_topk_prob";
  for (const LayerWeights& l : model_->weights().layers) {
    EXPECT_TRUE(l.moe.has_experts());
    EXPECT_EQ(l.moe.has_shared_expert(), name == "qwen2_moe");
  }
}

TEST_P(MoeFixture, BatchLogitsMatchTransformers) {
  const json& prompts = ref()["prompts"];
  std::vector<std::vector<TokenId>> tokens;
  const int block_size = 16;
  int64_t blocks_per_seq = 0;
  for (const json& p : prompts) {
    tokens.push_back(ids_of(p["ids"]));
    blocks_per_seq = std::max<int64_t>(blocks_per_seq, (int64_t(tokens.back().size()) + block_size - 1) / block_size);
  }
  const KvLayout layout = model_->kv_layout();
  RunnerConfig rc;
  rc.num_threads = 2;
  rc.kv = model_->kv_spec(DType::F32, DType::F32, block_size);
  rc.group_blocks.assign(layout.group_windows.size(), blocks_per_seq * int64_t(prompts.size()));
  ModelRunner runner(*model_, rc);
  std::vector<std::vector<BlockId>> tables(prompts.size());
  std::vector<SequenceChunk> chunks;
  for (size_t s = 0; s < prompts.size(); ++s) {
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables[s].push_back(BlockId(int64_t(s) * blocks_per_seq + b));
    SequenceChunk chunk;
    chunk.tokens = tokens[s];
    chunk.block_tables.assign(layout.group_windows.size(), std::span<const BlockId>(tables[s]));
    chunk.logits_from = prompts[s]["logits_from"].get<int64_t>();
    chunks.push_back(chunk);
  }
  const std::span<const float> logits = runner.execute(chunks);
  const size_t n_vocab = size_t(model_->config().n_vocab);
  size_t row = 0;
  double worst_ratio = 0.0;
  for (size_t s = 0; s < prompts.size(); ++s) {
    const std::vector<float> expected = prompts[s]["logits"].get<std::vector<float>>();
    const double max_logit = prompts[s]["max_abs_logit"].get<double>();
    const size_t rows = tokens[s].size() - prompts[s]["logits_from"].get<size_t>();
    ASSERT_EQ(expected.size(), rows * n_vocab) << "prompt " << s;
    double max_error = 0.0;
    size_t worst = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      const double error = std::fabs(double(logits[row * n_vocab + i]) - double(expected[i]));
      if (error > max_error) max_error = error, worst = i;
    }
    EXPECT_LE(max_error, 1e-4 * max_logit + 1e-4)
        << "prompt " << s << ": token " << worst % n_vocab << ", kestrel " << logits[row * n_vocab + worst]
        << ", transformers " << expected[worst];
    worst_ratio = std::max(worst_ratio, max_error / max_logit);
    row += rows;
  }
  std::printf("[ %s ] max |logit error| = %.3g of max|logit|\n", GetParam().c_str(), worst_ratio);
}

TEST_P(MoeFixture, GreedyTokensMatchTransformers) {
  std::vector<std::vector<TokenId>> prompts;
  for (const json& p : ref()["prompts"]) prompts.push_back(ids_of(p["ids"]));
  EngineConfig config;
  config.num_threads = 2;
  config.max_model_len = 256;
  config.kv_type_k = config.kv_type_v = DType::F32;
  const auto run = test::generate_greedy(*model_, {}, config, prompts, std::vector<int>(prompts.size(), 16));
  for (size_t s = 0; s < prompts.size(); ++s) {
    EXPECT_EQ(run.outputs[s], ids_of(ref()["prompts"][s]["greedy"])) << "prompt " << s;
  }
  EXPECT_TRUE(run.all_blocks_free);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeFixture, testing::Values("mixtral", "qwen2_moe", "qwen3_moe"),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace kestrel
