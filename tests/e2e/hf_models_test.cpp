// Hugging Face model folders against transformers itself: for each tiny random-weight fixture in
// tests/data/hf/ (scripts/gen_hf_fixtures.py: llama, mistral, qwen2, qwen3, gemma3), loaded as a
// folder and after `kestrel convert` to GGUF,
// - the logits of the batch runner (all prompts in one batch) equal transformers' float32 logits;
// - greedy generation through LLMEngine gives transformers' 16 tokens (64 for the sliding-window
//   models, far past their window of 8);
// - the tokenizer built from the folder's tokenizer.json encodes as transformers' tokenizer does.
//
// Logit tolerance: both sides compute in float32, in different orders (summation order, SIMD
// kernels, exp/pow implementations). Each dot product of length K <= 128 carries a relative
// rounding error of order sqrt(K) * 2^-24 ~ 1e-6, and a few layers of norms and residual adds keep
// the final error near that: measured at most 1.1e-6 of max|logit| on every fixture with
// KESTREL_ISA=scalar, avx2 and avx512 (the test prints the figure). 1e-4 * max|logit| + 1e-4 leaves
// ~100x headroom and is still far below a real bug's effect: a wrong RoPE pairing, norm offset,
// RoPE scaling or window moves logits by O(max|logit|) (e.g. ignoring the window: 0.6-1.1 of it).
// Greedy tokens are compared exactly: the fixtures are chosen so that every greedy step's top-1 /
// top-2 gap is >= 2e-4 of max|logit| (scripts/gen_hf_fixtures.py), 100x the measured error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "convert/hf_convert.h"
#include "core/error.h"
#include "engine/engine.h"
#include "loader/hf_folder.h"
#include "model/model.h"
#include "runner/model_runner.h"
#include "test_generate.h"
#include "reference_logits.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

using json = nlohmann::json;

std::string fixture_dir(const std::string& name) { return test::test_data_path("hf/" + name); }

const json& reference(const std::string& name) { return test::fixture_reference("hf/" + name); }

// The fixture converted to GGUF once per test process.
std::string converted_gguf(const std::string& name) {
  static std::map<std::string, std::string> paths;
  auto it = paths.find(name);
  if (it == paths.end()) {
    const std::string path = test::scratch_dir("hf_convert_" + name) + "/" + name + ".gguf";
    convert_hf_to_gguf(fixture_dir(name), path);
    it = paths.emplace(name, path).first;
  }
  return it->second;
}

// The two ways a fixture reaches Kestrel.
enum class Source { Folder, Converted };

struct Case {
  std::string name;
  Source source;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name << (c.source == Source::Folder ? " (folder)" : " (converted GGUF)");
}

std::string case_name(const testing::TestParamInfo<Case>& info) {
  return info.param.name + (info.param.source == Source::Folder ? "_folder" : "_gguf");
}

class HfModel : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    path_ = c.source == Source::Folder ? fixture_dir(c.name) : converted_gguf(c.name);
    model_ = Model::load(path_);
  }
  const json& ref() const { return reference(GetParam().name); }

  std::string path_;
  std::unique_ptr<Model> model_;
};

std::vector<TokenId> ids_of(const json& array) { return array.get<std::vector<TokenId>>(); }

TEST_P(HfModel, ConfigHasTheArchitecturesFeatures) {
  const ModelConfig& c = model_->config();
  const std::string& name = GetParam().name;
  EXPECT_EQ(c.n_vocab, ref()["vocab_size"].get<int64_t>());
  EXPECT_EQ(c.sliding_window, ref()["sliding_window"].get<int>());
  if (name == "llama") {
    EXPECT_NE(model_->weights().rope_freq_factors, nullptr) << "llama3 rope_scaling -> rope_freqs";
    EXPECT_FALSE(model_->weights().tied_output);
  }
  if (name == "mistral") {
    for (int64_t il = 0; il < c.n_layer; ++il) EXPECT_TRUE(c.is_sliding(il)) << il;
  }
  if (name == "qwen2") {
    EXPECT_TRUE(c.qkv_bias);
    EXPECT_TRUE(model_->weights().tied_output);
    EXPECT_EQ(c.sliding_window, 0) << "use_sliding_window is false";
  }
  if (name == "qwen3") {
    EXPECT_EQ(c.qk_norm, QkNorm::PerHead);
    EXPECT_EQ(c.q_width(), 128);
    EXPECT_EQ(c.n_embd, 64);
  }
  if (name == "gemma3") {
    // sliding_window_pattern 3: layers 0, 1 and 3 local, layer 2 global.
    const std::vector<bool> expected = {true, true, false, true};
    for (int64_t il = 0; il < c.n_layer; ++il) EXPECT_EQ(c.is_sliding(il), expected[size_t(il)]) << il;
    EXPECT_FLOAT_EQ(c.rope_freq_base, 1e6f);
    EXPECT_FLOAT_EQ(c.rope_freq_base_sliding, 1e4f);
    EXPECT_FLOAT_EQ(c.rope_freq_scale, 1.0f / 8.0f);
    EXPECT_FLOAT_EQ(c.attention_scale, 1.0f / std::sqrt(32.0f));  // query_pre_attn_scalar 32
    EXPECT_NE(model_->file().find("gemma3.attention.scale"), nullptr) << "from query_pre_attn_scalar";
    EXPECT_EQ(c.final_logit_softcap, 0.0f);
    EXPECT_TRUE(model_->weights().tied_output);
  }
}

// All prompts in one batch (separate block tables), logits of the positions transformers recorded.
TEST_P(HfModel, BatchLogitsMatchTransformers) { test::expect_batch_logits_match(*model_, ref(), GetParam().name); }

// The tests above read the small fixtures into memory (the default for a file this size); mapped
// from the files instead, the same logits.
TEST_P(HfModel, MappedWeightsMatchTransformersToo) {
  EXPECT_TRUE(model_->weights_in_memory());
  const auto mapped = Model::load(path_, {}, {.weights = WeightMemory::Mapped});
  EXPECT_FALSE(mapped->weights_in_memory());
  test::expect_batch_logits_match(*mapped, ref(), GetParam().name + " mapped");
}

// Greedy generation through the engine, all prompts at once, EOS ignored.
std::vector<std::vector<TokenId>> generate(const Model& model, const std::vector<std::vector<TokenId>>& prompts,
                                           int max_tokens) {
  EngineConfig config;
  config.num_threads = 2;
  config.max_model_len = 256;
  config.kv_type_k = config.kv_type_v = DType::F32;  // transformers' cache is F32
  return test::generate_greedy(model, {}, config, prompts, std::vector<int>(prompts.size(), max_tokens)).outputs;
}

TEST_P(HfModel, GreedyTokensMatchTransformers) {
  std::vector<std::vector<TokenId>> prompts;
  for (const json& p : ref()["prompts"]) prompts.push_back(ids_of(p["ids"]));
  const auto outputs = generate(*model_, prompts, 16);
  for (size_t s = 0; s < prompts.size(); ++s) {
    EXPECT_EQ(outputs[s], ids_of(ref()["prompts"][s]["greedy"])) << "prompt " << s;
  }
}

// Sliding-window models (mistral, gemma3): 64 tokens after prompts of 4-40, with a window of 8.
// (Freeing the KV blocks that fall out of the window is not tested here; only the outputs.)
class HfSlidingModel : public HfModel {};

TEST_P(HfSlidingModel, LongGreedyPastTheWindowMatchesTransformers) {
  ASSERT_EQ(model_->config().sliding_window, 8);
  std::vector<std::vector<TokenId>> prompts;
  for (const json& p : ref()["prompts"]) prompts.push_back(ids_of(p["ids"]));
  const auto outputs = generate(*model_, prompts, 64);
  for (size_t s = 0; s < prompts.size(); ++s) {
    EXPECT_EQ(outputs[s], ids_of(ref()["prompts"][s]["greedy_long"])) << "prompt " << s;
  }
}

TEST_P(HfModel, TokenizerMatchesTransformers) {
  const auto tokenizer = Tokenizer::from_gguf(model_->file());
  for (const json& t : ref()["tokenizer"]) {
    const std::string text = t["text"].get<std::string>();
    // transformers always matches added (special) tokens in the text: parse_special.
    EXPECT_EQ(tokenizer->encode(text, true, true), ids_of(t["with_special"])) << "'" << text << "' with special";
    EXPECT_EQ(tokenizer->encode(text, false, true), ids_of(t["without_special"])) << "'" << text << "'";
  }
}

std::vector<Case> cases_of(std::initializer_list<const char*> names) {
  std::vector<Case> cases;
  for (const char* name : names) {
    cases.push_back({name, Source::Folder});
    cases.push_back({name, Source::Converted});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfModel,
                         testing::ValuesIn(cases_of({"llama", "mistral", "qwen2", "qwen3", "gemma3"})), case_name);
INSTANTIATE_TEST_SUITE_P(Fixtures, HfSlidingModel, testing::ValuesIn(cases_of({"mistral", "gemma3"})), case_name);

// The converted GGUF holds what the folder presents: same tensors (names, shapes, types, bytes)
// and metadata.
TEST(HfConvert, GgufEqualsTheFolderView) {
  for (const char* name : {"llama", "mistral", "qwen2", "qwen3", "gemma3"}) {
    const auto folder = load_hf_folder(fixture_dir(name));
    const auto gguf = gguf::GgufFile::open(converted_gguf(name));
    ASSERT_EQ(folder->tensors().size(), gguf->tensors().size()) << name;
    for (const auto& t : folder->tensors()) {
      const gguf::TensorInfo* g = gguf->find_tensor(t.name);
      ASSERT_NE(g, nullptr) << name << ": " << t.name;
      EXPECT_EQ(g->dims, t.dims) << name << ": " << t.name;
      EXPECT_EQ(g->type, t.type) << name << ": " << t.name;
      ASSERT_EQ(g->num_bytes, t.num_bytes) << name << ": " << t.name;
      EXPECT_TRUE(std::equal(t.data, t.data + t.num_bytes, g->data)) << name << ": " << t.name;
    }
    for (const gguf::KeyValue& kv : folder->metadata()) {
      const gguf::Value* v = gguf->find(kv.key);
      ASSERT_NE(v, nullptr) << name << ": " << kv.key;
      EXPECT_EQ(gguf::value_to_display_string(*v, 1 << 20), gguf::value_to_display_string(kv.value, 1 << 20)) << name << ": " << kv.key;
    }
  }
}

}  // namespace
}  // namespace kestrel
