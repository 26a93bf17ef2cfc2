// The serving invariants for every KV cache type (core/kv_spec.h), and attention sinks through the
// engine. A request's greedy tokens and logprobs are bit-identical alone, in a batch, prefilled in
// chunks, after preemption and with its prefix from the prefix cache — for f16, bf16, fp8, q8_0,
// q4_0 and q4_0 with the Hadamard rotation, on Qwen3 (the transformers fixture, head size 32) and
// the default model Gemma 3 270M (head size 256). Streaming: a run inside its window is the same
// as without streaming, a run 8 windows long keeps its blocks bounded and stays chunking- and
// batch-invariant.
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "engine/engine.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

struct Generated {
  std::vector<TokenId> tokens;
  std::vector<float> logprobs;
  bool operator==(const Generated&) const = default;
};

struct KvCase {
  const char* name;
  DType type;
  bool rotate;
};

void PrintTo(const KvCase& c, std::ostream* os) { *os << c.name; }

const KvCase kCases[] = {{"f16", DType::F16, false},  {"bf16", DType::BF16, false},
                         {"fp8", DType::FP8_E4M3_PC, false}, {"q8_0", DType::Q8_0, false},
                         {"q4_0", DType::Q4_0, false}, {"q4_0_rotated", DType::Q4_0, true}};

// Runs every prompt through one engine (all queued before the first step); checks every block
// comes back.
std::vector<Generated> run(const Model& model, const std::vector<std::vector<TokenId>>& prompts, int max_tokens,
                           EngineConfig config, int64_t* preemptions = nullptr, int64_t* prefix_hits = nullptr,
                           int32_t* most_blocks = nullptr) {
  config.num_threads = 2;
  if (config.max_model_len == 0) config.max_model_len = 512;
  LLMEngine engine(model, config, {});
  std::map<RequestId, size_t> index;
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestSpec spec;
    spec.prompt = prompts[i];
    spec.max_tokens = max_tokens;
    spec.sampling.temperature = 0.0f;
    spec.sampling.top_logprobs = 0;
    spec.ignore_eos = true;
    index[engine.add_request(spec)] = i;
  }
  std::vector<Generated> out(prompts.size());
  int32_t most = 0;
  while (engine.has_unfinished()) {
    for (const RequestOutput& o : engine.step()) {
      for (const SampleResult& s : o.new_tokens) {
        out[index[o.id]].tokens.push_back(s.token);
        out[index[o.id]].logprobs.push_back(s.logprob);
      }
    }
    most = std::max(most, engine.kv().num_used_blocks());
  }
  EXPECT_EQ(engine.kv().num_free_blocks(), engine.kv().num_blocks()) << "blocks leaked";
  if (preemptions != nullptr) *preemptions = engine.scheduler().num_preemptions();
  if (prefix_hits != nullptr) *prefix_hits = engine.kv().prefix_hit_tokens();
  if (most_blocks != nullptr) *most_blocks = most;
  return out;
}

// Prompts of 5..40 tokens over the fixture's vocabulary.
std::vector<std::vector<TokenId>> prompts(size_t count, int32_t vocab, size_t base_length = 5) {
  std::vector<std::vector<TokenId>> result;
  for (size_t i = 0; i < count; ++i) {
    std::vector<TokenId> p;
    for (size_t j = 0; j < base_length + (i * 7) % 36; ++j) p.push_back(TokenId((i * 131 + j * 17 + 3) % size_t(vocab)));
    result.push_back(p);
  }
  return result;
}

class KvTypeEngine : public testing::TestWithParam<KvCase> {
 protected:
  static void SetUpTestSuite() { model_ = Model::load(test::test_data_path("hf/qwen3")).release(); }
  static void TearDownTestSuite() { delete model_; }
  EngineConfig config() const {
    EngineConfig c;
    c.kv_type_k = c.kv_type_v = GetParam().type;
    c.kv_rotate = GetParam().rotate;
    return c;
  }
  int32_t vocab() const { return int32_t(model_->config().n_vocab); }
  static inline Model* model_ = nullptr;
};

TEST_P(KvTypeEngine, BatchOf12EqualsEachAlone) {
  const auto ps = prompts(12, vocab());
  EngineConfig c = config();
  c.max_num_seqs = 12;
  const auto together = run(*model_, ps, 20, c);
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(together[i], run(*model_, {ps[i]}, 20, config())[0]) << i;
}

TEST_P(KvTypeEngine, ChunkedPrefillEqualsWholePrefill) {
  const auto p = prompts(1, vocab(), 150)[0];
  EngineConfig chunked = config();
  chunked.max_num_batched_tokens = 7;
  EXPECT_EQ(run(*model_, {p}, 24, chunked)[0], run(*model_, {p}, 24, config())[0]);
}

TEST_P(KvTypeEngine, PreemptionDoesNotChangeOutput) {
  const auto ps = prompts(8, vocab());
  EngineConfig tight = config();
  tight.num_kv_blocks = 12;
  tight.enable_prefix_caching = false;
  int64_t preemptions = 0;
  const auto squeezed = run(*model_, ps, 36, tight, &preemptions);
  EXPECT_GT(preemptions, 0) << "the test must actually preempt";
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(squeezed[i], run(*model_, {ps[i]}, 36, config())[0]) << i;
}

TEST_P(KvTypeEngine, PrefixCacheHitGivesIdenticalOutput) {
  std::vector<TokenId> a = prompts(1, vocab(), 64)[0];
  a.resize(64);
  std::vector<TokenId> b = a;
  for (TokenId t : {11, 12, 13}) a.push_back(t);
  for (TokenId t : {21, 22, 23, 24}) b.push_back(t);
  EngineConfig cached = config();
  cached.max_num_seqs = 1;  // b runs after a, so a's blocks are cached by then
  int64_t hits = 0;
  const auto with_cache = run(*model_, {a, b}, 24, cached, nullptr, &hits);
  EXPECT_GE(hits, 64);
  EngineConfig uncached = cached;
  uncached.enable_prefix_caching = false;
  EXPECT_EQ(with_cache, run(*model_, {a, b}, 24, uncached));
}

INSTANTIATE_TEST_SUITE_P(Types, KvTypeEngine, testing::ValuesIn(kCases),
                         [](const testing::TestParamInfo<KvCase>& info) { return std::string(info.param.name); });

// The real default model (head size 256, sliding-window layers): a batch of 4 equals each alone
// for q8_0 and rotated q4_0.
TEST(KvTypeGemma, BatchEqualsAlone) {
  const auto model = Model::load(test::default_model_path());
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  std::vector<std::vector<TokenId>> ps;
  for (const char* text : {"The capital of France is", "def fibonacci(n):", "Once upon a time",
                           "The three laws of robotics are"}) {
    ps.push_back(tokenizer->encode(text, true, false));
  }
  for (const KvCase& c : {kCases[3], kCases[5]}) {
    SCOPED_TRACE(c.name);
    EngineConfig config;
    config.kv_type_k = config.kv_type_v = c.type;
    config.kv_rotate = c.rotate;
    const auto together = run(*model, ps, 12, config);
    for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(together[i], run(*model, {ps[i]}, 12, config)[0]) << i;
  }
}

// Streaming on stories260K (f16) and the Qwen3 fixture (rotated q4_0): window 64, 4 sinks.
class Streaming : public testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (GetParam() == 0) {
      model_ = Model::load(test::shared_model_path("stories260K.gguf"));
    } else {
      model_ = Model::load(test::test_data_path("hf/qwen3"));
      type_ = DType::Q4_0;
      rotate_ = true;
    }
  }
  EngineConfig config(int sinks) const {
    EngineConfig c;
    c.kv_type_k = c.kv_type_v = type_;
    c.kv_rotate = rotate_;
    c.max_model_len = 64;
    c.attention_sinks = sinks;
    return c;
  }
  std::unique_ptr<Model> model_;
  DType type_ = DType::F16;
  bool rotate_ = false;
};

// While a sequence fits its window, streaming changes nothing, bit for bit.
TEST_P(Streaming, InsideTheWindowEqualsPlainAttention) {
  const auto p = prompts(1, int32_t(model_->config().n_vocab), 10)[0];
  EngineConfig plain = config(-1);
  EXPECT_EQ(run(*model_, {p}, 50, config(4))[0], run(*model_, {p}, 50, plain)[0]);
}

// 8 windows of generation: no failure, the blocks held stay those of the sinks, the window and a
// step; the tokens do not depend on chunking or on the batch around them.
TEST_P(Streaming, EightWindowsLongIsBoundedAndInvariant) {
  const int32_t vocab = int32_t(model_->config().n_vocab);
  const auto ps = prompts(3, vocab, 90);  // prompts already past the window
  int32_t most = 0;
  EngineConfig c = config(4);
  const auto alone = run(*model_, {ps[0]}, 512, c, nullptr, nullptr, &most);
  ASSERT_EQ(alone[0].tokens.size(), 512u);
  // 1 sink block + ceil(59 / 16) + 1 = 5 window blocks, + the chunk in flight (the 90-token
  // prompt: ceil(90 / 16) + 1 = 7), for the full-attention group.
  EXPECT_LE(most, 1 + 5 + 7);
  EngineConfig chunked = c;
  chunked.max_num_batched_tokens = 7;
  EXPECT_EQ(run(*model_, {ps[0]}, 512, chunked)[0], alone[0]) << "chunked prefill changed the stream";
  c.max_num_seqs = 3;
  EXPECT_EQ(run(*model_, ps, 512, c)[0], alone[0]) << "the batch changed the stream";
}

// A window without sinks (plain truncation) also runs, and differs from the one with sinks once
// the window has moved.
TEST_P(Streaming, SinksChangeTheStreamOnlyAfterTheWindowMoves) {
  const auto p = prompts(1, int32_t(model_->config().n_vocab), 20)[0];
  const auto with_sinks = run(*model_, {p}, 200, config(4))[0];
  const auto without = run(*model_, {p}, 200, config(0))[0];
  ASSERT_EQ(without.tokens.size(), 200u);
  // Identical up to the 64th position, where the window first drops a token.
  const size_t inside = 64 - p.size();
  EXPECT_TRUE(std::equal(with_sinks.logprobs.begin(), with_sinks.logprobs.begin() + long(inside), without.logprobs.begin()));
  EXPECT_NE(with_sinks.logprobs, without.logprobs);
}

INSTANTIATE_TEST_SUITE_P(Models, Streaming, testing::Values(0, 1),
                         [](const testing::TestParamInfo<int>& info) { return info.param == 0 ? "stories_f16" : "qwen3_q4_0_rotated"; });

// Without a KV memory size the cache is sized from the machine: a fraction of the memory
// available at start, never more than max_num_seqs full contexts use; the same memory holds twice
// the tokens in f16 as in f32.
TEST(KvCapacity, FromTheMachineAndPerType) {
  const auto model = Model::load(test::shared_model_path("stories260K.gguf"));
  EngineConfig c;
  c.kv_memory_bytes = 0;
  c.kv_memory_fraction = 0.5;
  c.max_num_seqs = 4;
  c.max_model_len = 512;
  KvCapacity capacity;
  resolve_kv_group_blocks(*model, c, &capacity);
  EXPECT_GT(capacity.available_bytes, 0);
  EXPECT_LE(capacity.bytes, capacity.available_bytes / 2);
  EXPECT_EQ(capacity.bytes_per_token, 5 * 4 * 8 * 2 * 2);  // layers x heads x head size x K,V x f16
  // stories260K is tiny: the cap binds (4 contexts of 32 blocks, plus a step's 128 blocks).
  EXPECT_EQ(capacity.tokens, (4 * 32 + 128) * 16);
  EXPECT_NE(describe(capacity).find("of "), std::string::npos) << describe(capacity);

  EngineConfig fixed;
  fixed.kv_memory_bytes = 1 << 20;
  KvCapacity f16, f32;
  resolve_kv_group_blocks(*model, fixed, &f16);
  fixed.kv_type_k = fixed.kv_type_v = DType::F32;
  resolve_kv_group_blocks(*model, fixed, &f32);
  EXPECT_EQ(f16.tokens, 2 * f32.tokens);
  EXPECT_LE(f16.bytes, 1 << 20);
  EXPECT_EQ(f16.available_bytes, 0) << "a given budget is not the machine's";
}

// Configurations the engine cannot run are refused at load with a message saying why.
TEST(KvTypeEngineErrors, TypesTheHeadSizeCannotUseFailAtLoad) {
  const auto model = Model::load(test::shared_model_path("stories260K.gguf"));
  // The message of the error constructing an engine raises; "" if it is not refused.
  auto refusal = [&](const EngineConfig& config) -> std::string {
    try {
      LLMEngine engine(*model, config, {});
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EngineConfig c;
  c.kv_type_k = DType::Q8_0;
  EXPECT_NE(refusal(c).find("head size is 8"), std::string::npos) << "q8_0 K on head size 8 must be refused";
  c.kv_type_k = DType::F16;
  c.attention_sinks = 600;
  c.max_model_len = 512;
  EXPECT_NE(refusal(c).find("must be fewer than the window"), std::string::npos) << "sinks >= window must be refused";
  // Sinks with a KV budget too small for one window.
  c.attention_sinks = 4;
  c.num_kv_blocks = 10;
  EXPECT_NE(refusal(c).find("one streaming sequence needs"), std::string::npos)
      << "a pool smaller than one streaming window must be refused";
}

}  // namespace
}  // namespace kestrel
