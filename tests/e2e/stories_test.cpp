// End-to-end checks on stories260K (llama2.c's tiny TinyStories model), against independent
// references: the documented greedy output (llama2.c / llama2.zig's test-inference.sh, and the ids
// in ../shared/models/SOURCES.md), and llama.cpp's llama-perplexity figures.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "convert/llama2c.h"
#include "core/error.h"
#include "convert/requantize.h"
#include "engine/engine.h"
#include "engine/perplexity.h"
#include "loader/gguf_reader.h"
#include "test_generate.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

// Documented temperature-0 output of stories260K from BOS: the text llama2.zig's
// test-inference.sh expects for `-t 0 -n 200` (200 generated tokens).
const char* kDocumentedText =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
    "One day, she saw a big, red ball. She wanted to play with it, but it was too high.\n"
    "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do. She "
    "said, \"I want to play with your ball, but I can't find it.\"\n"
    "Lily was sad and didn't know what to do. She said, \"I'm sorry, Lily. I didn't know what to "
    "do.\"\n"
    "Lily didn't want to help her mom, so she";

// First generated ids, from ../shared/models/SOURCES.md (an independent numpy reimplementation of
// llama2.c run.c).
const std::vector<TokenId> kDocumentedIds = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298,
                                             315, 421, 395, 317, 426, 338, 401, 396, 267, 337,
                                             410, 408, 419, 292, 411, 322, 265, 282, 295, 433,
                                             426, 385, 328, 432, 358, 394, 261, 370, 432};

std::string stories_path() { return test::shared_model_path("stories260K.gguf"); }

// Greedy generation of several prompts through one engine; returns each prompt's output tokens.
std::vector<std::vector<TokenId>> generate_greedy(const Model& model, const Tokenizer& tokenizer,
                                                  const std::vector<std::vector<TokenId>>& prompts,
                                                  int max_tokens, EngineConfig config = {}) {
  config.num_threads = 2;
  config.max_model_len = 512;
  auto run = test::generate_greedy(model, tokenizer.stop_token_ids(), config, prompts,
                                   std::vector<int>(prompts.size(), max_tokens));
  EXPECT_TRUE(run.all_blocks_free) << "blocks leaked";
  return std::move(run.outputs);
}

std::string greedy_text(const std::string& model_path, int max_tokens) {
  const auto model = Model::load(model_path);
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  const auto out = generate_greedy(*model, *tokenizer, {{tokenizer->bos_id()}}, max_tokens);
  StreamingDetokenizer detok(*tokenizer);
  detok.prime(tokenizer->bos_id());
  std::string text;
  for (TokenId t : out[0]) text += detok.push(t);
  return text + detok.flush();
}

TEST(Stories260K, GreedyFromBosReproducesDocumentedIds) {
  const auto model = Model::load(stories_path());
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  const auto out = generate_greedy(*model, *tokenizer, {{1}}, int(kDocumentedIds.size()));
  EXPECT_EQ(out[0], kDocumentedIds);
}

TEST(Stories260K, GreedyFromBosReproducesDocumentedText) {
  EXPECT_EQ(greedy_text(stories_path(), 200), kDocumentedText);
}

TEST(Stories260K, ConvertedFromLlama2cHasIdenticalTensorsAndOutput) {
  const std::string dir = test::scratch_dir("llama2c_convert");
  const std::string converted = dir + "/stories260K-converted.gguf";
  convert_llama2c_to_gguf(test::shared_model_path("stories260K.bin"),
                          test::shared_model_path("tok512.bin"), converted);
  const auto reference = gguf::GgufFile::open(stories_path());
  const auto ours = gguf::GgufFile::open(converted);
  ASSERT_EQ(ours->tensors().size(), reference->tensors().size());
  for (const auto& t : reference->tensors()) {
    const gguf::TensorInfo* mine = ours->find_tensor(t.name);
    ASSERT_NE(mine, nullptr) << t.name;
    EXPECT_EQ(mine->dims, t.dims) << t.name;
    EXPECT_EQ(mine->type, t.type) << t.name;
    ASSERT_EQ(mine->num_bytes, t.num_bytes) << t.name;
    EXPECT_EQ(std::memcmp(mine->data, t.data, t.num_bytes), 0) << t.name << " differs";
  }
  // The vocabulary must be the same too (pieces, scores, types), or text would differ.
  for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
    const gguf::Array* a = reference->get_array(key);
    const gguf::Array* b = ours->get_array(key);
    ASSERT_NE(b, nullptr) << key;
    ASSERT_EQ(a->items.size(), b->items.size()) << key;
    for (size_t i = 0; i < a->items.size(); ++i) {
      EXPECT_EQ(gguf::value_to_display_string(a->items[i]), gguf::value_to_display_string(b->items[i]))
          << key << "[" << i << "]";
    }
  }
  EXPECT_EQ(greedy_text(converted, 200), kDocumentedText);
}

TEST(Stories260K, TruncatedLlama2cCheckpointIsAClearError) {
  const std::string dir = test::scratch_dir("llama2c_truncated");
  const std::string full = test::read_file(test::shared_model_path("stories260K.bin"));
  const std::string truncated = dir + "/truncated.bin";
  {
    std::ofstream out(truncated, std::ios::binary);
    out.write(full.data(), std::streamsize(full.size() / 2));
  }
  try {
    convert_llama2c_to_gguf(truncated, test::shared_model_path("tok512.bin"), dir + "/out.gguf");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated checkpoint"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("truncated.bin"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/out.gguf"));
}

// Batch invariance: each prompt generated alone gives the same greedy tokens as all 8 together.
TEST(Stories260K, BatchOfEightEqualsEachAlone) {
  const auto model = Model::load(stories_path());
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  const std::vector<std::string> texts = {
      "Once upon a time", "Tom had a red ball", "The cat sat on the mat and", "One day, a little bird",
      "Sara and Ben went to the park", "There was a big dog named Max", "The sun was hot", "Lily"};
  std::vector<std::vector<TokenId>> prompts;
  for (const auto& t : texts) prompts.push_back(tokenizer->encode(t, true, false));
  const auto together = generate_greedy(*model, *tokenizer, prompts, 48);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto alone = generate_greedy(*model, *tokenizer, {prompts[i]}, 48);
    EXPECT_EQ(alone[0], together[i]) << "prompt " << i << ": " << texts[i];
  }
}

// Preemption frees a request's blocks and recomputes it later from its tokens: the output must not
// change. A pool of 10 blocks cannot hold four 53-token sequences at once.
TEST(Stories260K, PreemptedRequestsGiveTheSameTokens) {
  const auto model = Model::load(stories_path());
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  std::vector<std::vector<TokenId>> prompts;
  for (const char* t : {"The dog ran", "A girl named Mia", "Once upon a time", "Tim and his mom"}) {
    prompts.push_back(tokenizer->encode(t, true, false));
  }
  EngineConfig small;
  small.num_kv_blocks = 10;
  small.num_threads = 2;
  small.max_model_len = 512;
  LLMEngine engine(*model, small, tokenizer->stop_token_ids());
  std::map<RequestId, std::vector<TokenId>> outputs;
  std::vector<RequestId> ids;
  for (const auto& prompt : prompts) {
    RequestSpec spec;
    spec.prompt = prompt;
    spec.max_tokens = 48;
    spec.sampling.temperature = 0.0f;
    spec.ignore_eos = true;
    ids.push_back(engine.add_request(spec));
  }
  while (engine.has_unfinished()) {
    for (const RequestOutput& out : engine.step()) {
      for (const SampleResult& s : out.new_tokens) outputs[out.id].push_back(s.token);
    }
  }
  EXPECT_GT(engine.scheduler().num_preemptions(), 0) << "the test must actually preempt";
  EXPECT_EQ(engine.kv().num_free_blocks(), 10);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(outputs[ids[i]], generate_greedy(*model, *tokenizer, {prompts[i]}, 48)[0]) << i;
  }
}

// llama.cpp's llama-perplexity (built from llama-cpp-python 0.3.36's vendored llama.cpp) on
// tinystories_val.txt, -c 512 --chunks 8: F32 3.5026 (stories260K.gguf); and on the files written
// by `kestrel quantize`: F16 3.5025, BF16 3.5050, Q8_0 3.5092, Q4_0 3.9539.
struct FormatCase {
  const char* type;
  double llama_cpp_ppl;
};

double perplexity_of(const std::string& path, int64_t chunks) {
  const auto model = Model::load(path);
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  const std::string text = test::read_file(test::shared_model_path("text/tinystories_val.txt"));
  const auto tokens = tokenizer->encode(text, true, false);
  PerplexityOptions options;
  options.n_ctx = 512;
  options.max_chunks = chunks;
  options.bos_token = tokenizer->bos_id();
  return compute_perplexity(*model, tokens, options, nullptr).perplexity;
}

TEST(Stories260K, PerplexityMatchesLlamaCppForEveryFormat) {
  const std::string dir = test::scratch_dir("requantize");
  std::map<std::string, double> ppl;
  ppl["F32"] = perplexity_of(stories_path(), 8);
  EXPECT_NEAR(ppl["F32"], 3.5026, 3.5026 * 0.005);
  for (const FormatCase& c : {FormatCase{"F16", 3.5025}, FormatCase{"BF16", 3.5050},
                              FormatCase{"Q8_0", 3.5092}, FormatCase{"Q4_0", 3.9539}}) {
    const std::string path = dir + "/stories260K-" + c.type + ".gguf";
    std::vector<std::string> fallbacks;
    requantize_gguf(stories_path(), path, *dtype_from_name(c.type), [&](const RequantizeNote& n) {
      if (n.fallback) fallbacks.push_back(n.tensor);
    });
    // The FFN is 172 wide: ffn_down rows cannot hold 32-blocks and fall back, one per layer.
    if (std::string(c.type).starts_with("Q")) {
      EXPECT_EQ(fallbacks.size(), 5u) << c.type;
      for (const auto& name : fallbacks) EXPECT_NE(name.find("ffn_down"), std::string::npos) << name;
    } else {
      EXPECT_TRUE(fallbacks.empty()) << c.type;
    }
    ppl[c.type] = perplexity_of(path, 8);
    EXPECT_NEAR(ppl[c.type], c.llama_cpp_ppl, c.llama_cpp_ppl * 0.005) << c.type;
  }
  // Expected order: F32 <= F16 ~ BF16 < Q8_0 < Q4_0 (small differences).
  EXPECT_NEAR(ppl["F16"], ppl["F32"], ppl["F32"] * 0.002);
  EXPECT_NEAR(ppl["BF16"], ppl["F32"], ppl["F32"] * 0.005);
  EXPECT_GT(ppl["Q8_0"], ppl["F32"]);
  EXPECT_GT(ppl["Q4_0"], ppl["Q8_0"]);
  EXPECT_LT(ppl["Q4_0"], ppl["F32"] * 1.25);
}

}  // namespace
}  // namespace kestrel
