// GGUF files of the architectures beyond the Hugging Face folder fixtures, against transformers:
// each tiny random-weight model in tests/data/arch/ (scripts/gen_arch_fixtures.py) was built with
// transformers and converted by llama.cpp's own convert_hf_to_gguf.py, so the tensor names and
// metadata are llama.cpp's. For each:
// - the logits of the batch runner (all prompts in one batch) equal transformers' float32 logits;
// - greedy generation through LLMEngine gives transformers' 16 tokens (64 more for the
//   sliding-window models, far past their window of 8);
// - the tokenizer read from the GGUF encodes as transformers' tokenizer does.
//
// Tolerances are hf_models_test.cpp's (1e-4 * max|logit| + 1e-4; both sides compute in float32
// in different orders, about 1e-6 of max|logit| apart), far below what a wrong norm kind, a
// missing bias, a wrong RoPE pairing or a wrong scale does (O(max|logit|)). The fixtures keep every
// greedy step's top-1/top-2 gap >= 2e-4 of max|logit|, so greedy tokens are compared exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/calibration_pass.h"
#include "engine/engine.h"
#include "loader/gguf_writer.h"
#include "model/model.h"
#include "runner/model_runner.h"
#include "test_generate.h"
#include "reference_logits.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

using json = nlohmann::json;

std::string fixture_gguf(const std::string& name) { return test::test_data_path("arch/" + name + "/model.gguf"); }

const json& reference(const std::string& name) { return test::fixture_reference("arch/" + name); }

std::vector<TokenId> ids_of(const json& array) { return array.get<std::vector<TokenId>>(); }

class ArchModel : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { model_ = Model::load(fixture_gguf(GetParam())); }
  const json& ref() const { return reference(GetParam()); }
  std::unique_ptr<Model> model_;
};

// What each file must switch on (model_config.h), read from llama.cpp's metadata and tensors.
TEST_P(ArchModel, ConfigHasTheArchitecturesFeatures) {
  const ModelConfig& c = model_->config();
  const ModelWeights& w = model_->weights();
  const std::string& name = GetParam();
  EXPECT_EQ(c.n_vocab, ref()["vocab_size"].get<int64_t>());
  EXPECT_EQ(c.sliding_window, ref()["sliding_window"].get<int>());
  const LayerWeights& l0 = w.layers[0];
  if (name == "gemma2") {
    EXPECT_EQ(c.architecture, "gemma2");
    EXPECT_GT(c.attn_logit_softcap, 0.0f);
    EXPECT_GT(c.final_logit_softcap, 0.0f);
    EXPECT_TRUE(c.post_norms);
    const std::vector<bool> expected = {true, false, true, false};  // even layers local
    for (int64_t il = 0; il < c.n_layer; ++il) EXPECT_EQ(c.is_sliding(il), expected[size_t(il)]) << il;
  }
  if (name == "phi3") {
    ASSERT_NE(model_->file().find_tensor("blk.0.attn_qkv.weight"), nullptr) << "fused q/k/v";
    EXPECT_EQ(model_->file().find_tensor("blk.0.ffn_gate.weight"), nullptr) << "fused gate+up";
    // The three views are consecutive row ranges of the one fused tensor.
    EXPECT_EQ(static_cast<const uint8_t*>(l0.wk.data) - static_cast<const uint8_t*>(l0.wq.data),
              c.q_width() * c.n_embd * int64_t(sizeof(float)));
    EXPECT_EQ(l0.w_up.rows, c.n_ff);
  }
  if (name == "phi3_longrope") {
    EXPECT_NE(w.rope_factors_long, nullptr);
    EXPECT_NE(w.rope_factors_short, nullptr);
    EXPECT_EQ(c.rope_orig_ctx, 16);
    EXPECT_NEAR(c.rope_attn_factor, std::sqrt(2.0f), 1e-6f);
    EXPECT_EQ(c.n_rot, 12) << "partial rotary 0.75 of 16";
    EXPECT_EQ(w.rope_factors_for(0, c), w.rope_factors_long) << "the training context, 256, is past 16";
    EXPECT_EQ(w.rope_factors_for(16, c), w.rope_factors_short);
    EXPECT_EQ(w.rope_factors_for(17, c), w.rope_factors_long);
  }
  if (name == "qwen2_yarn") {
    // YaRN factor 4 over 64 original positions, 8 rotary pairs of a 16-wide head (base 1e4):
    // correction dims max(0, floor(-0.994)) = 0 and ceil(2.016) = 3, so pair i < 3 keeps
    // 1 - i/3 of its own frequency, pairs 3-7 are divided by 4; cos/sin gain 1 + 0.1 ln 4.
    EXPECT_EQ(c.architecture, "qwen2");
    const std::vector<float> expected = {1.0f, 1.0f / (2.0f / 3.0f + 1.0f / 12.0f), 2.0f, 4.0f, 4.0f, 4.0f, 4.0f, 4.0f};
    ASSERT_EQ(c.rope_yarn_divisors.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(c.rope_yarn_divisors[i], expected[i], 1e-5f) << i;
    EXPECT_NEAR(c.rope_attn_factor, 1.0f + 0.1f * std::log(4.0f), 1e-6f);
    EXPECT_FLOAT_EQ(c.rope_freq_scale, 1.0f) << "YaRN scales per pair, not linearly";
  }
  if (name == "granite") {
    EXPECT_FLOAT_EQ(c.embedding_scale, 12.0f);
    EXPECT_FLOAT_EQ(c.residual_scale, 0.22f);
    EXPECT_FLOAT_EQ(c.attention_scale, 0.125f);
    EXPECT_FLOAT_EQ(c.logit_scale, 1.0f / 8.0f);
  }
  if (name == "olmo2") {
    EXPECT_FALSE(c.input_norms);
    EXPECT_EQ(l0.attn_norm, nullptr);
    EXPECT_EQ(c.qk_norm, QkNorm::Full);
    EXPECT_TRUE(c.post_norms);
  }
  if (name == "smollm3") {
    for (int64_t il = 0; il < c.n_layer; ++il) EXPECT_EQ(c.has_rope(il), (il + 1) % 4 != 0) << il;
  }
  if (name == "starcoder2") {
    EXPECT_FALSE(c.gated_ffn);
    EXPECT_EQ(c.norm, NormKind::Layer);
    EXPECT_NE(l0.bo, nullptr);
    EXPECT_NE(l0.b_up, nullptr);
    EXPECT_NE(l0.b_down, nullptr);
    EXPECT_NE(w.output_norm_b, nullptr);
  }
  if (name == "stablelm" || name == "stablelm_parallel") {
    EXPECT_EQ(c.norm, NormKind::Layer);
    EXPECT_LT(c.n_rot, c.head_dim) << "partial rotary";
    EXPECT_NE(l0.bq, nullptr);
    EXPECT_EQ(c.parallel_block, name == "stablelm_parallel");
  }
  if (name == "cohere" || name == "cohere_qknorm") {
    EXPECT_EQ(c.norm, NormKind::Layer);
    EXPECT_TRUE(c.parallel_block);
    EXPECT_FALSE(c.rope_neox);
    EXPECT_FLOAT_EQ(c.logit_scale, 0.25f);
    EXPECT_EQ(c.qk_norm, name == "cohere" ? QkNorm::None : QkNorm::PerHeadEach);
  }
}

// All prompts in one batch (separate block tables), logits of the positions transformers recorded.
TEST_P(ArchModel, BatchLogitsMatchTransformers) { test::expect_batch_logits_match(*model_, ref(), GetParam()); }

std::vector<std::vector<TokenId>> generate(const Model& model, const std::vector<std::vector<TokenId>>& prompts,
                                           int max_tokens, int64_t max_model_len = 256) {
  EngineConfig config;
  config.num_threads = 2;
  config.max_model_len = max_model_len;
  config.kv_type_k = config.kv_type_v = DType::F32;
  return test::generate_greedy(model, {}, config, prompts, std::vector<int>(prompts.size(), max_tokens)).outputs;
}

TEST_P(ArchModel, GreedyTokensMatchTransformers) {
  std::vector<std::vector<TokenId>> prompts;
  for (const json& p : ref()["prompts"]) prompts.push_back(ids_of(p["ids"]));
  const bool sliding = ref()["sliding_window"].get<int>() > 0;
  const auto outputs = generate(*model_, prompts, sliding ? 64 : 16);
  for (size_t s = 0; s < prompts.size(); ++s) {
    const std::vector<TokenId> expected = ids_of(ref()["prompts"][s][sliding ? "greedy_long" : "greedy"]);
    EXPECT_EQ(outputs[s], expected) << "prompt " << s;
  }
}

TEST_P(ArchModel, TokenizerMatchesTransformers) {
  const auto tokenizer = Tokenizer::from_gguf(model_->file());
  for (const json& t : ref()["tokenizer"]) {
    const std::string text = t["text"].get<std::string>();
    EXPECT_EQ(tokenizer->encode(text, true, true), ids_of(t["with_special"])) << "'" << text << "' with special";
    EXPECT_EQ(tokenizer->encode(text, false, true), ids_of(t["without_special"])) << "'" << text << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ArchModel,
                         testing::Values("gemma2", "phi3", "phi3_longrope", "internlm2", "granite", "olmo2", "smollm3", "starcoder2", "stablelm",
                                         "stablelm_parallel", "cohere", "cohere_qknorm", "qwen2_yarn"),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

// OLMo 2 normalizes q and k over all heads at once. A tensor-parallel rank keeps its own heads'
// rows of wq / wk / wv and wo's columns, but the whole-width norm weights: the forward pass gathers
// every head, normalizes as one process does and keeps its own (decoder_forward.cpp; the outputs
// are checked under mpirun by distributed_test's olmo2 / olmoe cases).
TEST(ArchModelSplit, FullWidthQkNormSplitKeepsTheWholeNorm) {
  const auto whole = Model::load(fixture_gguf("olmo2"));
  const ModelConfig& config = whole->config();
  ASSERT_EQ(config.qk_norm, QkNorm::Full);
  ASSERT_EQ(config.n_head % 2, 0);
  ASSERT_EQ(config.n_head_kv % 2, 0);
  for (int rank = 0; rank < 2; ++rank) {
    const auto part = Model::load(fixture_gguf("olmo2"), ShardRequest{2, rank, 1, 0, false});
    const RankSlice& me = part->shard().mine();
    EXPECT_EQ(me.n_head(), config.n_head / 2);
    EXPECT_EQ(me.n_head_kv(), config.n_head_kv / 2);
    const auto& mine = part->weights().layers[0];
    const auto& all = whole->weights().layers[0];
    EXPECT_EQ(mine.wq.rows, all.wq.rows / 2);
    EXPECT_EQ(mine.wk.rows, all.wk.rows / 2);
    EXPECT_EQ(mine.wo.cols, all.wo.cols / 2);
    // The norm weights are the whole model's, all heads wide, value for value.
    ASSERT_NE(mine.q_norm, nullptr);
    ASSERT_NE(mine.k_norm, nullptr);
    const int64_t q_width = config.n_head * config.head_dim, k_width = config.n_head_kv * config.head_dim;
    EXPECT_TRUE(std::equal(mine.q_norm, mine.q_norm + q_width, all.q_norm));
    EXPECT_TRUE(std::equal(mine.k_norm, mine.k_norm + k_width, all.k_norm));
  }
}

// LongRoPE (Phi-3 128k, Phi-3.5, Phi-4-mini): the generic tests run phi3_longrope at a context
// of 256, past its original 16, where both engines use the long factors; at a context of 16
// Kestrel uses the short ones, as transformers does for sequences that stay within 16 positions.
// The two factor lists differ in every frequency, so a wrong pick or a missing attn_factor is
// O(max|logit|) off.
TEST(ArchLongRope, ShortContextUsesTheShortFactors) {
  const auto model = Model::load(fixture_gguf("phi3_longrope"));
  const json& short_context = reference("phi3_longrope")["short_context"];
  const int64_t context = short_context["context"].get<int64_t>();
  test::expect_batch_logits_match(*model, short_context, "phi3_longrope short context", context);
  std::vector<std::vector<TokenId>> prompts;
  for (const json& p : short_context["prompts"]) prompts.push_back(ids_of(p["ids"]));
  const int greedy = int(short_context["prompts"][0]["greedy"].size());
  const auto outputs = generate(*model, prompts, greedy, context);
  for (size_t s = 0; s < prompts.size(); ++s) {
    EXPECT_EQ(outputs[s], ids_of(short_context["prompts"][s]["greedy"])) << "prompt " << s;
  }
}

// The long-context prompts at a context within the original one (short factors) must NOT match:
// the test above and the generic ones could otherwise pass with the factors ignored.
TEST(ArchLongRope, TheFactorsChangeTheLogits) {
  const auto model = Model::load(fixture_gguf("phi3_longrope"));
  const json& prompt = reference("phi3_longrope")["prompts"][0];
  const std::vector<TokenId> ids = ids_of(prompt["ids"]);
  const int64_t from = prompt["logits_from"].get<int64_t>();
  const std::vector<float> expected = prompt["logits"].get<std::vector<float>>();
  for (int64_t context : {int64_t(16), int64_t(0)}) {
    const std::vector<float> logits = test::batch_logits(*model, {ids}, {from}, context);
    ASSERT_EQ(logits.size(), expected.size());
    double max_error = 0.0;
    for (size_t i = 0; i < logits.size(); ++i) max_error = std::max(max_error, double(std::fabs(logits[i] - expected[i])));
    const double max_logit = prompt["max_abs_logit"].get<double>();
    if (context == 0) {
      EXPECT_LE(max_error, 1e-4 * max_logit + 1e-4) << "long factors";
    } else {
      EXPECT_GT(max_error, 0.05 * max_logit) << "short factors on a long-context reference";
    }
  }
}

// A file with only one of the two LongRoPE factor tensors is refused, naming the missing one.
TEST(ArchModelErrors, LongRopeWithOneFactorListIsRefused) {
  const auto source = gguf::GgufFile::open(fixture_gguf("phi3"));
  gguf::GgufWriter writer;
  for (const gguf::KeyValue& kv : source->metadata()) writer.set(kv.key, kv.value);
  for (const auto& t : source->tensors()) {
    writer.add_tensor_view(t.name, t.type, t.dims, std::span<const uint8_t>(t.data, t.num_bytes));
  }
  const int64_t half = Model::load(fixture_gguf("phi3"))->config().n_rot / 2;  // one factor per rotated pair
  std::vector<uint8_t> ones(size_t(half) * sizeof(float));
  for (int64_t i = 0; i < half; ++i) reinterpret_cast<float*>(ones.data())[i] = 1.0f;
  writer.add_tensor("rope_factors_long.weight", DType::F32, {half}, ones);
  const std::string path = test::scratch_dir("arch_longrope") + "/phi3_longrope.gguf";
  writer.write(path);
  try {
    Model::load(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has only rope_factors_long.weight"), std::string::npos) << e.what();
  }
}

// The calibrated quantizers rewrite tensors by name and fold scales into RMSNorms: a model whose
// layers they cannot rewrite is refused by name before any work (llama.cpp-layout Llama-like
// fixtures pass).
TEST(ArchModelCalibration, UnsupportedLayoutsAreRefusedByName) {
  const auto limit = [](const std::string& name, bool names_only) {
    return calibration_limit(*Model::load(fixture_gguf(name)), names_only);
  };
  EXPECT_EQ(limit("granite", false), "");
  EXPECT_EQ(limit("smollm3", false), "");
  EXPECT_EQ(limit("phi3", true), "fused attn_qkv tensors");
  EXPECT_EQ(limit("olmo2", false), "blocks without input norms");
  EXPECT_EQ(limit("olmo2", true), "");  // an importance matrix only needs the names
  EXPECT_EQ(limit("cohere", false), "LayerNorm");
  EXPECT_EQ(limit("starcoder2", false), "LayerNorm");

  struct Ignore : LayerPassObserver {
    void observe(int64_t, LinearKind, const float*, int64_t, int64_t) override { ADD_FAILURE() << "ran"; }
    void end_pass(int64_t, bool) override { ADD_FAILURE() << "ran"; }
  } observer;
  const auto model = Model::load(fixture_gguf("starcoder2"));
  CalibrationPass pass;
  pass.n_ctx = 4;
  pass.n_chunks = 1;
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  try {
    run_layerwise_calibration(*model, tokens, pass, observer, "AWQ");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("AWQ calibration does not support architecture 'starcoder2'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kestrel
