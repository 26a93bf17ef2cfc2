// Serving invariants on a real model (stories260K): greedy output of a prompt is identical alone,
// in a batch of 32, after preemption, and when its prefix comes from the prefix cache — down to
// the bits of the logprobs. After every test every block is back in the free pool.
#include <gtest/gtest.h>

#include <map>

#include "engine/async_engine.h"
#include "loader/gguf_writer.h"
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

class EngineInvariants : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = Model::load(test::shared_model_path("stories260K.gguf")).release();
    tokenizer_ = Tokenizer::from_gguf(model_->file()).release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
  }

  // Runs every prompt through one engine; all requests are queued before the first step.
  static std::vector<Generated> run(const std::vector<std::vector<TokenId>>& prompts, int max_tokens,
                                    EngineConfig config, int64_t* preemptions = nullptr,
                                    int64_t* prefix_hits = nullptr) {
    config.num_threads = 2;
    config.max_model_len = 1024;
    LLMEngine engine(*model_, config, tokenizer_->stop_token_ids());
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
    while (engine.has_unfinished()) {
      for (const RequestOutput& o : engine.step()) {
        for (const SampleResult& s : o.new_tokens) {
          out[index[o.id]].tokens.push_back(s.token);
          out[index[o.id]].logprobs.push_back(s.logprob);
        }
      }
    }
    EXPECT_EQ(engine.kv().num_free_blocks(), engine.kv().num_blocks()) << "blocks leaked";
    if (preemptions != nullptr) *preemptions = engine.scheduler().num_preemptions();
    if (prefix_hits != nullptr) *prefix_hits = engine.kv().prefix_hit_tokens();
    return out;
  }

  static std::vector<std::vector<TokenId>> prompts(size_t count) {
    std::vector<std::vector<TokenId>> result;
    const char* starts[] = {"Once upon a time", "The little dog", "Tim wanted a", "Sue and her mom",
                            "A big bird flew", "There was a cat", "One sunny day", "The boy found"};
    for (size_t i = 0; i < count; ++i) {
      std::string text = std::string(starts[i % 8]) + (i >= 8 ? " and " + std::to_string(i) : "");
      result.push_back(tokenizer_->encode(text, true, false));
    }
    return result;
  }

  static inline Model* model_ = nullptr;
  static inline Tokenizer* tokenizer_ = nullptr;
};

TEST_F(EngineInvariants, BatchOf32EqualsEachAloneBitForBit) {
  const auto ps = prompts(32);
  EngineConfig config;
  config.max_num_seqs = 32;
  const auto together = run(ps, 24, config);
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(together[i], run({ps[i]}, 24, EngineConfig{})[0]) << "prompt " << i;
  }
}

TEST_F(EngineInvariants, ChunkedPrefillEqualsWholePrefill) {
  std::vector<TokenId> long_prompt = tokenizer_->encode(
      "Once upon a time there was a girl. She had a dog. The dog was big and brown. They played in the "
      "park every day and ate ice cream and ran in the sun until it was dark.",
      true, false);
  EngineConfig chunked;
  chunked.max_num_batched_tokens = 7;  // the prompt is prefilled 7 tokens at a time
  EXPECT_EQ(run({long_prompt}, 32, chunked)[0], run({long_prompt}, 32, EngineConfig{})[0]);
}

TEST_F(EngineInvariants, PreemptionDoesNotChangeOutput) {
  const auto ps = prompts(8);
  EngineConfig tight;
  tight.num_kv_blocks = 12;  // 8 sequences of ~40 tokens need ~24 blocks
  tight.enable_prefix_caching = false;
  int64_t preemptions = 0;
  const auto squeezed = run(ps, 36, tight, &preemptions);
  EXPECT_GT(preemptions, 0) << "the test must actually preempt";
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(squeezed[i], run({ps[i]}, 36, EngineConfig{})[0]) << i;
}

TEST_F(EngineInvariants, PrefixCacheHitGivesIdenticalOutput) {
  // Two prompts sharing a 64-token prefix (4 full blocks), then diverging.
  std::vector<TokenId> shared = tokenizer_->encode(
      "Once upon a time there was a little girl named Lily who loved to play outside in the park with "
      "her big red ball and her friend Tom",
      true, false);
  shared.resize(64);
  auto a = shared, b = shared;
  for (TokenId t : tokenizer_->encode(" The sun was hot.", false, false)) a.push_back(t);
  for (TokenId t : tokenizer_->encode(" It began to rain.", false, false)) b.push_back(t);

  EngineConfig cached;
  cached.max_num_seqs = 1;  // b runs after a, so a's blocks are in the cache by then
  int64_t hits = 0;
  const auto with_cache = run({a, b}, 32, cached, nullptr, &hits);
  EXPECT_GE(hits, 64) << "b must reuse a's four full blocks";
  EngineConfig uncached = cached;
  uncached.enable_prefix_caching = false;
  int64_t no_hits = -1;
  const auto without = run({a, b}, 32, uncached, nullptr, &no_hits);
  EXPECT_EQ(no_hits, 0);
  EXPECT_EQ(with_cache, without) << "prefix caching must be bit-identical";
}

TEST_F(EngineInvariants, ParallelSamplingSharesPromptBlocks) {
  // n = 3 siblings of a 70-token prompt: the later two reuse the first one's full blocks.
  std::vector<TokenId> prompt = prompts(1)[0];
  while (prompt.size() < 70) prompt.push_back(TokenId(300 + prompt.size() % 100));
  EngineConfig config;
  config.num_threads = 2;
  config.max_model_len = 1024;
  LLMEngine engine(*model_, config, tokenizer_->stop_token_ids());
  RequestSpec spec;
  spec.prompt = prompt;
  spec.max_tokens = 8;
  spec.sampling.temperature = 0.9f;
  spec.sampling.seed = 1;
  const RequestId first = engine.add_request(spec);
  for (uint64_t seed : {2u, 3u}) {
    spec.sampling.seed = seed;
    spec.prefix_source = first;
    engine.add_request(spec);
  }
  while (engine.has_unfinished()) engine.step();
  EXPECT_EQ(engine.kv().prefix_hit_tokens(), 2 * 64);
  EXPECT_EQ(engine.kv().num_free_blocks(), engine.kv().num_blocks());
}

// stories260K with a 24-token sliding window on every layer (a Mistral-style model): freeing the
// blocks that leave the window must not change a single token, and the blocks held stay bounded
// while generating far past the window.
TEST_F(EngineInvariants, SlidingWindowBlockFreeingIsExactAndBounded) {
  const std::string dir = test::scratch_dir("sliding_window");
  const std::string path = dir + "/stories-window24.gguf";
  {
    const auto source = gguf::GgufFile::open(test::shared_model_path("stories260K.gguf"));
    gguf::GgufWriter writer;
    for (const auto& kv : source->metadata()) writer.set(kv.key, kv.value);
    writer.set_u32("llama.attention.sliding_window", 24);
    for (const auto& t : source->tensors()) {
      writer.add_tensor_view(t.name, t.type, t.dims, std::span<const uint8_t>(t.data, t.num_bytes));
    }
    writer.write(path);
  }
  const auto model = Model::load(path);
  ASSERT_EQ(model->config().sliding_window, 24);
  const std::vector<TokenId> prompt = tokenizer_->encode("Once upon a time", true, false);
  auto generate = [&](bool free_blocks, int64_t* max_held) {
    EngineConfig config;
    config.num_threads = 2;
    config.max_model_len = 1024;
    config.free_out_of_window_blocks = free_blocks;
    LLMEngine engine(*model, config, tokenizer_->stop_token_ids());
    RequestSpec spec;
    spec.prompt = prompt;
    spec.max_tokens = 300;
    spec.sampling.temperature = 0.0f;
    spec.sampling.top_logprobs = 0;
    spec.ignore_eos = true;
    engine.add_request(spec);
    Generated out;
    *max_held = 0;
    while (engine.has_unfinished()) {
      for (const RequestOutput& o : engine.step()) {
        for (const SampleResult& s : o.new_tokens) {
          out.tokens.push_back(s.token);
          out.logprobs.push_back(s.logprob);
        }
      }
      *max_held = std::max<int64_t>(*max_held, engine.kv().num_used_blocks());
    }
    EXPECT_EQ(engine.kv().num_free_blocks(), engine.kv().num_blocks());
    return out;
  };
  int64_t held_freeing = 0, held_keeping = 0;
  const Generated freeing = generate(true, &held_freeing);
  const Generated keeping = generate(false, &held_keeping);
  EXPECT_EQ(freeing, keeping) << "freeing out-of-window blocks must be exact";
  // 24 positions span at most ceil(23/16) + 1 = 3 blocks, +1 for the block being filled.
  EXPECT_LE(held_freeing, 4);
  EXPECT_GE(held_keeping, (300 + 5) / 16);
}

TEST_F(EngineInvariants, AbortMidPrefillFreesBlocksAndOthersFinish) {
  AsyncEngineConfig config;
  config.engine.num_threads = 2;
  config.engine.max_model_len = 1024;
  config.engine.max_num_batched_tokens = 16;  // a 600-token prompt takes ~38 steps to prefill
  AsyncEngine engine(*model_, *tokenizer_, config);
  GenerateRequest long_request;
  for (int i = 0; i < 600; ++i) long_request.prompt.push_back(TokenId(1 + (i * 7) % 500));
  long_request.max_tokens = 10;
  GenerateRequest short_request;
  short_request.prompt = prompts(1)[0];
  short_request.max_tokens = 20;
  short_request.sampling.temperature = 0.0f;
  auto aborted = engine.submit(long_request);
  auto finished = engine.submit(short_request);
  GenerationEvent event;
  // Let the long prompt get partly prefilled, then abort it.
  while (engine.metrics().prompt_tokens == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  engine.abort(aborted->id());
  bool aborted_seen = false;
  while (aborted->next(&event, std::chrono::seconds(30))) {
    if (event.finished) {
      aborted_seen = true;
      EXPECT_EQ(event.finish_reason, FinishReason::Abort);
      EXPECT_LT(event.completion_tokens, 10);
      break;
    }
  }
  EXPECT_TRUE(aborted_seen);
  std::string text;
  bool done = false;
  while (!done && finished->next(&event, std::chrono::seconds(30))) {
    text += event.text;
    done = event.finished;
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(event.completion_tokens, 20);
  engine.wait_idle();
  const MetricsSnapshot m = engine.metrics();
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.requests_abort, 1);
}

}  // namespace
}  // namespace kestrel
