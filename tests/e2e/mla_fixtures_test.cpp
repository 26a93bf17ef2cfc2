// DeepSeek-V2's multi-head latent attention (mla_attention.h) against transformers: the tiny random
// fixtures tests/data/arch/deepseek2_lite (queries by attn_q, as DeepSeek-V2-Lite) and
// tests/data/arch/deepseek2 (queries through a rank-20 latent, as DeepSeek-V2), made by
// scripts/gen_arch_fixtures.py with transformers' DeepseekV2ForCausalLM and converted by llama.cpp's
// convert_hf_to_gguf.py (which splits kv_b_proj into attn_k_b / attn_v_b for the absorbed form).
// Value heads (12) differ from key heads (16 + 8 rotary); layer 0 is dense, layers 1-2 MoE with two
// ungated shared experts and routed weights * 1.5, not renormalized. tests/data/arch/deepseek2_yarn
// is the Lite fixture with DeepSeek-V2-Lite's kind of YaRN (mscale = mscale_all_dim; the reference
// applies DeepSeek's softmax scale * mscale^2, which transformers 4.57's DeepseekV2 leaves out).
// - Logits of all prompts in one batch equal transformers' float32 logits within 1e-4 * max|logit|
//   + 1e-4 (moe_fixtures_test.cpp's argument; transformers decompresses the keys and values,
//   Kestrel attends in the latent: the same sums in another order). A wrong scale (1 / sqrt of the
//   latent key's 32 instead of 24), RoPE on the wrong dimensions or pairs, a missing latent norm, a
//   sigmoid-gated shared expert or renormalized routing each move logits by O(max|logit|).
// - Greedy generation through the engine gives transformers' 16 tokens with the latent cache (one
//   head of kv_lora_rank + rope values per token, V read from K) in F32, F16 and Q8_0.
// tests/data/arch/deepseek2_groups routes as DeepSeek-V2 236B (the best 2 of 4 expert groups by their
// best softmax score, then the top 3 experts of those); tests/data/arch/deepseek3 as DeepSeek-V3
// (transformers' DeepseekV3ForCausalLM: sigmoid scores, a selection bias that chooses but does not
// weight, groups ranked by their two best biased scores, renormalized weights * 2.5). Their seeds
// keep every routing decision 1e-4 clear of a tie, so a wrong rule changes the chosen experts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/kv_spec.h"
#include "engine/engine.h"
#include "loader/gguf_writer.h"
#include "model/model.h"
#include "gguf_edit.h"
#include "model_load_error.h"
#include "reference_logits.h"
#include "test_generate.h"
#include "test_paths.h"

namespace kestrel {
namespace {

using json = nlohmann::json;

std::string fixture_gguf(const std::string& name) { return test::test_data_path("arch/" + name + "/model.gguf"); }

std::vector<TokenId> ids_of(const json& array) { return array.get<std::vector<TokenId>>(); }

class MlaFixture : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { model_ = Model::load(fixture_gguf(GetParam())); }
  const json& ref() const { return test::fixture_reference("arch/" + GetParam()); }
  std::unique_ptr<Model> model_;
};

TEST_P(MlaFixture, ConfigReadsLatentAttentionAndSharedExperts) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.architecture, "deepseek2");
  ASSERT_TRUE(c.mla.enabled());
  EXPECT_EQ(c.mla.kv_lora_rank, 24);
  const bool lite = GetParam() == "deepseek2_lite" || GetParam() == "deepseek2_yarn";
  const bool v3 = GetParam() == "deepseek3";
  EXPECT_EQ(c.mla.q_lora_rank, lite ? 0 : 20);
  EXPECT_EQ(c.mla.nope_dim, 16);
  EXPECT_EQ(c.mla.rope_dim, 8);
  EXPECT_EQ(c.mla.v_dim, 12);
  EXPECT_EQ(c.head_dim, 32) << "the cache's one latent head: kv_lora_rank + rope";
  EXPECT_EQ(c.n_head_kv, 1);
  if (GetParam() == "deepseek2_yarn") {
    // YaRN factor 8 over 64 original positions, 4 rotary pairs: corrections dims floor(-0.50) -> 0
    // and ceil(1.008) = 2, so pair 0 keeps its frequency, pair 1 mixes half and half, pairs 2-3
    // are divided by 8; the logits scale gains (1 + 0.1 * 0.707 ln 8)^2, cos/sin nothing
    // (mscale = mscale_all_dim).
    const float m = 1.0f + 0.1f * 0.707f * std::log(8.0f);
    EXPECT_NEAR(c.attention_scale, m * m / std::sqrt(24.0f), 1e-6f);
    EXPECT_NEAR(c.rope_attn_factor, 1.0f, 1e-6f);
    ASSERT_EQ(c.rope_yarn_divisors.size(), 4u);
    const float expected[4] = {1.0f, 1.0f / (0.5f + 0.5f / 8.0f), 8.0f, 8.0f};
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(c.rope_yarn_divisors[size_t(i)], expected[i], 1e-5f) << "pair " << i;
  } else {
    EXPECT_FLOAT_EQ(c.attention_scale, 1.0f / std::sqrt(24.0f)) << "the decompressed heads' scale";
    EXPECT_TRUE(c.rope_yarn_divisors.empty());
  }
  EXPECT_EQ(c.attn_out_width(), 4 * 12);
  EXPECT_FALSE(c.rope_neox);
  const bool grouped = GetParam() == "deepseek2_groups" || v3;
  EXPECT_EQ(c.moe.n_expert, grouped ? 8 : 4);
  EXPECT_EQ(c.moe.n_expert_used, grouped ? 3 : 2);
  EXPECT_EQ(c.moe.normalize_top_k, v3);
  EXPECT_FLOAT_EQ(c.moe.weights_scale, v3 ? 2.5f : 1.5f);
  EXPECT_EQ(c.moe.n_ff_shared, (v3 ? 1 : 2) * 32);
  EXPECT_FALSE(c.moe.shared_gated);
  EXPECT_EQ(c.moe.gating, v3 ? MoeConfig::Gating::Sigmoid : MoeConfig::Gating::Softmax);
  EXPECT_EQ(c.moe.group_limited(), grouped);
  if (grouped) {
    EXPECT_EQ(c.moe.n_group, 4);
    EXPECT_EQ(c.moe.n_group_used, 2);
    EXPECT_EQ(c.moe.group_score, v3 ? MoeConfig::GroupScore::TopTwoSum : MoeConfig::GroupScore::Max);
  }
  const auto& layers = model_->weights().layers;
  EXPECT_FALSE(layers[0].moe.has_experts()) << "first_k_dense_replace 1";
  for (size_t il = 1; il < layers.size(); ++il) {
    EXPECT_TRUE(layers[il].moe.has_experts());
    EXPECT_TRUE(layers[il].moe.has_shared_expert());
    EXPECT_EQ(layers[il].moe.shared_gate_inp.data, nullptr);
    EXPECT_EQ(layers[il].moe.selection_bias != nullptr, v3) << "exp_probs_b of layer " << il;
  }
  // One latent head of 32 values per token, F32, and no separate V (it is the key's first 24
  // values): 128 bytes per layer, where the decompressed heads would take 4 * (24 + 12) * 4.
  const KvCacheSpec spec = model_->kv_spec(DType::F32, DType::F32);
  EXPECT_TRUE(spec.value_in_key);
  EXPECT_EQ(spec.token_bytes(), 32 * 4);
  // What the latent cache cannot honour is an error, not a silent change: a V type other than K's,
  // a Hadamard rotation (it would rotate the values), attention sinks.
  auto expect_spec_error = [](const KvCacheSpec& bad, const std::string& phrase) {
    try {
      validate_kv_spec(bad);
      ADD_FAILURE() << "accepted: " << phrase;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    }
  };
  expect_spec_error(model_->kv_spec(DType::F16, DType::F32), "must equal the K type");
  KvCacheSpec rotated = model_->kv_spec(DType::F16, DType::F16);
  rotated.rotate = true;
  expect_spec_error(rotated, "--kv-rotate cannot be used with latent attention");
  KvCacheSpec sinks = model_->kv_spec(DType::F16, DType::F16);
  sinks.rolling_window = 64;
  sinks.sink_tokens = 4;
  expect_spec_error(sinks, "--attention-sinks cannot be used with latent attention");
}

TEST_P(MlaFixture, BatchLogitsMatchTransformers) { test::expect_batch_logits_match(*model_, ref(), GetParam()); }

TEST_P(MlaFixture, GreedyTokensMatchTransformers) {
  std::vector<std::vector<TokenId>> prompts;
  for (const json& p : ref()["prompts"]) prompts.push_back(ids_of(p["ids"]));
  // A Q8_0 cache moves the hidden states by more than float rounding; with group-limited routing
  // (a group choice before the expert choice) these tiny models' routing margins are below that,
  // and with a Q8_0 cache one prompt of each leaves transformers' tokens. F32 and F16 must match.
  const bool grouped = model_->config().moe.group_limited();
  std::vector<DType> kv_types = {DType::F32, DType::F16};
  if (!grouped) kv_types.push_back(DType::Q8_0);
  for (DType kv_type : kv_types) {
    EngineConfig config;
    config.num_threads = 2;
    config.max_model_len = 256;
    config.kv_type_k = config.kv_type_v = kv_type;
    const auto run = test::generate_greedy(*model_, {}, config, prompts, std::vector<int>(prompts.size(), 16));
    for (size_t s = 0; s < prompts.size(); ++s) {
      EXPECT_EQ(run.outputs[s], ids_of(ref()["prompts"][s]["greedy"])) << "prompt " << s << ", cache "
                                                                        << dtype_name(kv_type);
    }
    EXPECT_TRUE(run.all_blocks_free);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MlaFixture,
                         testing::Values("deepseek2_lite", "deepseek2", "deepseek2_yarn", "deepseek2_groups", "deepseek3"),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

// Opt-in: DeepSeek-V2-Lite's attention at its real sizes (a latent key of 576 values, 16 heads,
// YaRN factor 40), made by bench/mla_real_dims.py (~1 GB, not in the repository); the folder is
// given by KESTREL_MLA_REAL_DIMS. Skipped without it.
TEST(MlaRealDimensions, LogitsAndGreedyMatchTransformers) {
  const char* folder = std::getenv("KESTREL_MLA_REAL_DIMS");
  if (folder == nullptr) GTEST_SKIP() << "set KESTREL_MLA_REAL_DIMS (bench/mla_real_dims.py)";
  const auto model = Model::load(std::string(folder) + "/model.gguf");
  const json ref = json::parse(test::read_file(std::string(folder) + "/reference.json"));
  ASSERT_EQ(model->config().head_dim, 576);
  ASSERT_EQ(model->config().n_head, 16);
  test::expect_batch_logits_match(*model, ref, "deepseek2_real_dims");
  std::vector<std::vector<TokenId>> prompts;
  for (const json& p : ref["prompts"]) prompts.push_back(ids_of(p["ids"]));
  EngineConfig config;
  config.num_threads = 2;
  config.max_model_len = 256;
  config.kv_type_k = config.kv_type_v = DType::F32;
  const auto run = test::generate_greedy(*model, {}, config, prompts, std::vector<int>(prompts.size(), 16));
  // No seed search made this file: greedy tokens are compared only if no step was a near-tie.
  double max_logit = 0.0;
  for (const json& p : ref["prompts"]) max_logit = std::max(max_logit, p["max_abs_logit"].get<double>());
  if (ref["min_greedy_margin"].get<double>() < 2e-4 * max_logit) GTEST_SKIP() << "greedy near-tie in the reference";
  for (size_t s = 0; s < prompts.size(); ++s) {
    EXPECT_EQ(run.outputs[s], ids_of(ref["prompts"][s]["greedy"])) << "prompt " << s;
  }
}

// DeepSeek-V3's multi-token-prediction block (nextn) stored after the main stack: a copy of the
// deepseek3 fixture with a fourth block (layer 2's tensors again) and nextn_predict_layers 1 gives
// the three-block reference logits, as llama.cpp leaves that block out of the forward pass.
TEST(MlaModelLoad, NextnBlocksAreLeftOutOfTheForwardPass) {
  const auto source = gguf::GgufFile::open(fixture_gguf("deepseek3"));
  gguf::GgufWriter writer;
  for (const auto& kv : source->metadata()) {
    writer.set(kv.key, kv.key == "deepseek2.block_count" ? gguf::Value::of_u32(4) : kv.value);
  }
  writer.set_u32("deepseek2.nextn_predict_layers", 1);
  for (const auto& t : source->tensors()) {
    std::vector<uint8_t> bytes(t.data, t.data + t.num_bytes);
    if (t.name.starts_with("blk.2.")) writer.add_tensor("blk.3." + t.name.substr(6), t.type, t.dims, bytes);
    writer.add_tensor(t.name, t.type, t.dims, std::move(bytes));
  }
  const std::string path = test::scratch_dir("mla_nextn") + "/model.gguf";
  writer.write(path);
  const auto model = Model::load(path);
  EXPECT_EQ(model->config().n_layer, 3);
  test::expect_batch_logits_match(*model, test::fixture_reference("arch/deepseek3"), "deepseek3 with a nextn block");
}

// A copy of the Lite fixture with metadata and tensors edited (return false to drop).
std::string edited_lite(const std::string& name, const test::KeyEdit& edit_key, const test::TensorEdit& edit_tensor) {
  return test::edited_gguf_copy(fixture_gguf("deepseek2_lite"), "mla_" + name, edit_key, edit_tensor);
}

const auto keep_key = test::keep_key;
const auto keep_tensor = test::keep_tensor;

TEST(MlaModelLoad, BadFilesAreClearErrors) {
  // A file converted before llama.cpp split attn_kv_b: named, with the way out.
  // As such a file is: attn_kv_b in every layer and no *_mla keys.
  test::expect_load_error(edited_lite("legacy",
                                      [](const std::string& key, gguf::Value&) { return key.find("_mla") == std::string::npos; },
                                      [](gguf::TensorInfo& t, std::vector<uint8_t>&) {
                                        if (t.name.ends_with("attn_k_b.weight")) {
                                          t.name.replace(t.name.find("attn_k_b"), 8, "attn_kv_b");
                                        }
                                        return !t.name.ends_with("attn_v_b.weight");
                                      }),
                          {"attn_kv_b", "old layout", "convert the model again"});
  // The same tensors with the *_mla keys kept: the layer loader names the tensor.
  test::expect_load_error(edited_lite("legacy_keys", keep_key,
                                      [](gguf::TensorInfo& t, std::vector<uint8_t>&) {
                                        if (t.name == "blk.1.attn_k_b.weight") t.name = "blk.1.attn_kv_b.weight";
                                        return t.name != "blk.1.attn_v_b.weight";
                                      }),
                          {"blk.1.attn_kv_b.weight", "convert the model again"});
  // attn_k_b of the wrong head count.
  test::expect_load_error(edited_lite("heads", keep_key,
                                      [](gguf::TensorInfo& t, std::vector<uint8_t>& bytes) {
                                        if (t.name == "blk.2.attn_k_b.weight") {
                                          t.dims[2] = 3;
                                          bytes.resize(bytes.size() / 4 * 3);
                                        }
                                        return true;
                                      }),
                          {"blk.2.attn_k_b.weight", "holds 3 heads", "deepseek2.attention.head_count is 4"});
  // A latent key length that is not kv_lora_rank + rope.
  test::expect_load_error(edited_lite("key_length",
                                      [](const std::string& key, gguf::Value& v) {
                                        if (key == "deepseek2.attention.key_length") v = gguf::Value::of_u32(40);
                                        return true;
                                      },
                                      keep_tensor),
                          {"deepseek2.attention.key_length 40", "kv_lora_rank 24"});
  // Expert groups that do not partition the 4 experts, or more groups used than exist, or fewer
  // groups than hold a token's 2 experts.
  auto edited_groups = [](const std::string& name, uint32_t groups, uint32_t used) {
    return edited_lite(name,
                       [groups, used](const std::string& key, gguf::Value& v) {
                         if (key == "deepseek2.expert_group_count") v = gguf::Value::of_u32(groups);
                         if (key == "deepseek2.expert_group_used_count") v = gguf::Value::of_u32(used);
                         return true;
                       },
                       keep_tensor);
  };
  // A count of 0 (llama.cpp's model saver writes it for every MoE file) or 1 means no groups.
  for (uint32_t none : {0u, 1u}) {
    const auto model = Model::load(edited_groups("groups_none_" + std::to_string(none), none, none));
    EXPECT_FALSE(model->config().moe.group_limited()) << none;
  }
  test::expect_load_error(edited_groups("groups_divide", 3, 1), {"expert_group_count 3 must divide", "expert_count 4"});
  test::expect_load_error(edited_groups("groups_used", 2, 3), {"expert_group_used_count 3 must be between 1 and"});
  test::expect_load_error(edited_groups("groups_hold", 4, 1), {"expert_used_count 2 exceeds the 1 experts of 1 of 4 groups"});
  // A gating function of another family (3: softmax over the chosen experts' logits).
  test::expect_load_error(test::edited_gguf_copy(fixture_gguf("deepseek3"), "mla_gating",
                                                 [](const std::string& key, gguf::Value& v) {
                                                   if (key == "deepseek2.expert_gating_func") v = gguf::Value::of_u32(3);
                                                   return true;
                                                 },
                                                 keep_tensor),
                          {"expert_gating_func 3 is not supported", "2 sigmoid"});
  // A selection bias of the wrong length.
  test::expect_load_error(test::edited_gguf_copy(fixture_gguf("deepseek3"), "mla_bias", keep_key,
                                                 [](gguf::TensorInfo& t, std::vector<uint8_t>& bytes) {
                                                   if (t.name == "blk.2.exp_probs_b.bias") {
                                                     t.dims[0] = 7;
                                                     bytes.resize(7 * 4);
                                                   }
                                                   return true;
                                                 }),
                          {"blk.2.exp_probs_b.bias"});
  // Tensor parallelism splits the query heads; the one latent KV head is every rank's (the forward
  // pass under mpirun: distributed_test).
  for (const char* name : {"deepseek2_lite", "deepseek2"}) {
    for (int rank = 0; rank < 2; ++rank) {
      const auto part = Model::load(fixture_gguf(name), ShardRequest{2, rank, 1, 0, false});
      const RankSlice& me = part->shard().mine();
      EXPECT_EQ(me.n_head(), 2) << name;
      EXPECT_EQ(me.n_head_kv(), 1) << name;
      const MlaLayerWeights& m = part->weights().layers[0].mla;
      const MlaConfig& mla = part->config().mla;
      EXPECT_EQ(m.n_head, 2) << name;
      EXPECT_EQ(m.k_b.rows, 2 * mla.kv_lora_rank) << name;
      EXPECT_EQ(m.v_b.rows, 2 * mla.v_dim) << name;
      EXPECT_EQ(m.kv_a.rows, mla.kv_lora_rank + mla.rope_dim) << name;
      EXPECT_EQ(mla.q_lora_rank > 0 ? m.q_b.rows : part->weights().layers[0].wq.rows, 2 * mla.q_head_dim()) << name;
      EXPECT_EQ(part->weights().layers[0].wo.cols, 2 * mla.v_dim) << name;
    }
  }
}

}  // namespace
}  // namespace kestrel
