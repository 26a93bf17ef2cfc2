// Mixture-of-Experts models against transformers: the tiny random MoE fixtures of
// tests/data/arch/ (scripts/gen_arch_fixtures.py: Mixtral, Qwen2-MoE with its shared expert,
// Qwen3-MoE, OLMoE with its whole-projection q/k norms; 4 experts, 2 per token) as llama.cpp's
// converter writes them.
// - Logits of all prompts in one batch equal transformers' float32 logits within
//   1e-4 * max|logit| + 1e-4 (the argument of hf_models_test.cpp: float32 on both sides, only the
//   summation order differs; the fixtures keep every router's k-th and (k+1)-th probabilities
//   >= 1e-4 apart, 100x their float32 rounding, so rounding cannot swap an expert, and a wrong normalization or a missing shared
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
#include "reference_logits.h"
#include "test_generate.h"
#include "test_paths.h"

namespace kestrel {
namespace {

using json = nlohmann::json;

std::string fixture_dir(const std::string& name) { return test::test_data_path("arch/" + name); }

const json& reference(const std::string& name) { return test::fixture_reference("arch/" + name); }

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
  const std::map<std::string, std::string> arch = {
      {"mixtral", "llama"}, {"qwen2_moe", "qwen2moe"}, {"qwen3_moe", "qwen3moe"}, {"olmoe", "olmoe"}};
  EXPECT_EQ(c.architecture, arch.at(name));
  EXPECT_EQ(c.moe.normalize_top_k, name != "qwen2_moe" && name != "olmoe") << "norm_topk_prob";
  if (name == "olmoe") {
    EXPECT_EQ(c.qk_norm, QkNorm::Full);
  }
  for (const LayerWeights& l : model_->weights().layers) {
    EXPECT_TRUE(l.moe.has_experts());
    EXPECT_EQ(l.moe.has_shared_expert(), name == "qwen2_moe");
  }
}

TEST_P(MoeFixture, BatchLogitsMatchTransformers) { test::expect_batch_logits_match(*model_, ref(), GetParam()); }

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

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeFixture, testing::Values("mixtral", "qwen2_moe", "qwen3_moe", "olmoe"),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace kestrel
