// ChatSession (`kestrel chat`) on a real model, stories260K with the built-in chatml template (the
// model has none): later turns reuse the earlier turns' KV blocks — prompt and generated tokens —
// through the prefix cache, the replies are exactly those computed from scratch, and a
// conversation that outgrows the context fails cleanly and recovers after clear(); a stopped
// reply keeps what was streamed.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "engine/chat_session.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

struct Turn {
  std::vector<TokenId> prompt;
  std::vector<TokenId> reply;
  std::string text;
  ChatTurnStats stats;
};

class ChatSessionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = Model::load(test::shared_model_path("stories260K.gguf")).release();
    tokenizer_ = Tokenizer::from_gguf(model_->file()).release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
  }

  static chat::ChatTemplate builtin(const char* name) {
    return chat::ChatTemplate::parse(*chat::builtin_chat_template(name));
  }
  static chat::ChatTemplate chatml() { return builtin("chatml"); }

  static ChatSessionOptions greedy(int64_t max_reply_tokens, std::string system = "You tell short stories.") {
    ChatSessionOptions options;
    options.system_prompt = std::move(system);
    options.max_reply_tokens = max_reply_tokens;
    options.sampling.temperature = 0.0f;
    return options;
  }

  // Runs the user messages as one conversation.
  static std::vector<Turn> converse(const Model& model, const Tokenizer& tokenizer, const char* template_name,
                                    const ChatSessionOptions& options, const std::vector<std::string>& messages,
                                    bool prefix_caching) {
    EngineConfig config = make_chat_engine_config(model, 512, 2);
    config.enable_prefix_caching = prefix_caching;
    LLMEngine engine(model, config, tokenizer.stop_token_ids());
    ChatSession session(engine, tokenizer, builtin(template_name), options);
    std::vector<Turn> turns;
    for (const std::string& message : messages) {
      Turn turn;
      turn.stats = session.send(message, [&](std::string_view text) { turn.text += text; });
      turn.prompt = session.last_prompt();
      turn.reply = session.last_reply();
      EXPECT_EQ(engine.kv().num_free_blocks(), engine.kv().num_blocks()) << "blocks leaked";
      turns.push_back(std::move(turn));
    }
    return turns;
  }
  static std::vector<Turn> converse(const std::vector<std::string>& messages, bool prefix_caching,
                                    int64_t max_reply_tokens) {
    return converse(*model_, *tokenizer_, "chatml", greedy(max_reply_tokens), messages, prefix_caching);
  }

  static inline Model* model_ = nullptr;
  static inline Tokenizer* tokenizer_ = nullptr;
};

const std::vector<std::string> kMessages = {"Tell me a story about a cat.", "What did the cat do next?",
                                            "And how did it end?"};

TEST_F(ChatSessionTest, LaterTurnsReuseThePreviousPromptAndReplyBlocks) {
  const int block = EngineConfig{}.block_size;
  const std::vector<Turn> turns = converse(kMessages, /*prefix_caching=*/true, 24);
  ASSERT_EQ(turns.size(), 3u);
  EXPECT_EQ(turns[0].stats.cached_tokens, 0);
  for (size_t k = 1; k < turns.size(); ++k) {
    const Turn& previous = turns[k - 1];
    const Turn& turn = turns[k];
    ASSERT_FALSE(previous.reply.empty());
    // chatml renders history as it rendered the previous prompt, and stories260K's replies
    // tokenize back to the ids it sampled: the new prompt extends the previous prompt + reply.
    std::vector<TokenId> history = previous.prompt;
    history.insert(history.end(), previous.reply.begin(), previous.reply.end());
    ASSERT_GT(turn.prompt.size(), history.size());
    EXPECT_TRUE(std::equal(history.begin(), history.end(), turn.prompt.begin())) << "turn " << k + 1;
    // Every full block of that history was cached, generated tokens included, except that the
    // reply's last token is never fed back (so its block may be incomplete): at most one block
    // short of the history rounded down to blocks.
    const int64_t full = int64_t(history.size()) / block * block;
    EXPECT_GE(turn.stats.cached_tokens, full - block) << "turn " << k + 1;
    EXPECT_LE(turn.stats.cached_tokens, int64_t(turn.prompt.size()) - 1);
    EXPECT_EQ(turn.stats.cached_tokens % block, 0);
    // More than the previous prompt alone: blocks holding generated tokens were reused too.
    EXPECT_GT(turn.stats.cached_tokens, int64_t(previous.prompt.size()) / block * block)
        << "turn " << k + 1;
  }
  EXPECT_GT(turns[2].stats.cached_tokens, turns[1].stats.cached_tokens);
}

TEST_F(ChatSessionTest, RepliesWithReuseEqualRepliesFromScratch) {
  const std::vector<Turn> reused = converse(kMessages, /*prefix_caching=*/true, 24);
  const std::vector<Turn> scratch = converse(kMessages, /*prefix_caching=*/false, 24);
  ASSERT_EQ(reused.size(), scratch.size());
  for (size_t k = 0; k < reused.size(); ++k) {
    EXPECT_EQ(scratch[k].stats.cached_tokens, 0);
    EXPECT_EQ(reused[k].prompt, scratch[k].prompt) << "turn " << k + 1;
    EXPECT_EQ(reused[k].reply, scratch[k].reply) << "turn " << k + 1;
    EXPECT_EQ(reused[k].text, scratch[k].text) << "turn " << k + 1;
    EXPECT_FALSE(reused[k].text.empty());
  }
}

// Gemma 3 (the tests/data/hf fixture: sliding window 8 on 2 of 3 layers). A chat engine keeps the
// sliding layers' blocks so the prefix cache works; the gemma template trims the reply, so reuse
// reaches at least the previous prompt's full blocks, and the replies are those from scratch.
TEST_F(ChatSessionTest, SlidingWindowModelReusesBlocksAndMatchesScratch) {
  const auto model = Model::load(test::test_data_path("hf/gemma3"));
  const auto tokenizer = Tokenizer::from_gguf(model->file());
  const int block = EngineConfig{}.block_size;
  const ChatSessionOptions options = greedy(20, "");
  const std::vector<Turn> reused = converse(*model, *tokenizer, "gemma", options, kMessages, true);
  const std::vector<Turn> scratch = converse(*model, *tokenizer, "gemma", options, kMessages, false);
  ASSERT_EQ(reused.size(), scratch.size());
  for (size_t k = 0; k < reused.size(); ++k) {
    EXPECT_EQ(reused[k].prompt, scratch[k].prompt) << "turn " << k + 1;
    EXPECT_EQ(reused[k].reply, scratch[k].reply) << "turn " << k + 1;
    EXPECT_EQ(scratch[k].stats.cached_tokens, 0);
    if (k == 0) continue;
    const int64_t previous_prompt = int64_t(reused[k - 1].prompt.size());
    EXPECT_GE(reused[k].stats.cached_tokens, previous_prompt / block * block) << "turn " << k + 1;
    EXPECT_GT(reused[k].stats.cached_tokens, 0) << "turn " << k + 1;
  }
}

TEST_F(ChatSessionTest, HistoryHoldsTheStreamedReplies) {
  EngineConfig config = make_chat_engine_config(*model_, 512, 2);
  LLMEngine engine(*model_, config, tokenizer_->stop_token_ids());
  ChatSession session(engine, *tokenizer_, chatml(), greedy(16));
  std::string streamed;
  session.send("Hello", [&](std::string_view text) { streamed += text; });
  const auto& messages = session.messages();
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[0]["role"], "system");
  EXPECT_EQ(messages[1]["content"], "Hello");
  EXPECT_EQ(messages[2]["role"], "assistant");
  EXPECT_EQ(messages[2]["content"].get<std::string>(), streamed);
  session.clear();
  EXPECT_EQ(session.messages().size(), 1u);  // the system prompt stays
}

TEST_F(ChatSessionTest, OverlongConversationFailsCleanlyAndWorksAfterClear) {
  // A context of 96 tokens: a few turns fill it.
  EngineConfig config = make_chat_engine_config(*model_, 96, 2);
  LLMEngine engine(*model_, config, tokenizer_->stop_token_ids());
  ChatSession session(engine, *tokenizer_, chatml(), greedy(24));
  bool context_full = false;
  bool cut = false;
  for (int turn = 0; turn < 20 && !context_full; ++turn) {
    const size_t before = session.messages().size();
    try {
      const ChatTurnStats stats = session.send("Tell me more.", {});
      EXPECT_LE(stats.prompt_tokens + stats.generated_tokens, engine.max_model_len());
      cut = cut || stats.context_full;
    } catch (const ContextFullError& e) {
      context_full = true;
      EXPECT_NE(std::string(e.what()).find("the context holds 96"), std::string::npos) << e.what();
      EXPECT_EQ(session.messages().size(), before) << "a refused message must not be kept";
    }
    EXPECT_EQ(engine.kv().num_free_blocks(), engine.kv().num_blocks()) << "blocks leaked";
  }
  ASSERT_TRUE(context_full);
  EXPECT_TRUE(cut) << "the reply that reached the end of the context is flagged";
  // Still full: the same error again, not a crash.
  EXPECT_THROW(session.send("Tell me more.", {}), ContextFullError);

  session.clear();
  std::string text;
  const ChatTurnStats stats = session.send("Tell me more.", [&](std::string_view t) { text += t; });
  EXPECT_GT(stats.generated_tokens, 0);
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(session.messages().size(), 3u);
}

// Ctrl-C in `kestrel chat`: the stop check ends the reply where it is. A reply cut after some
// tokens stays in the conversation as streamed (and the next turn reuses its blocks); one stopped
// before its first token leaves the conversation as it was.
TEST_F(ChatSessionTest, StoppedReplyKeepsWhatWasStreamedOrDropsAnEmptyTurn) {
  EngineConfig config = make_chat_engine_config(*model_, 512, 2);
  LLMEngine engine(*model_, config, tokenizer_->stop_token_ids());
  ChatSession session(engine, *tokenizer_, chatml(), greedy(400));
  std::string streamed;
  int pieces = 0;
  const ChatTurnStats cut = session.send(
      "Tell me a story.", [&](std::string_view text) { streamed += text, ++pieces; }, [&] { return pieces >= 5; });
  EXPECT_EQ(cut.finish_reason, FinishReason::Abort);
  EXPECT_GE(cut.generated_tokens, 5);
  EXPECT_LT(cut.generated_tokens, 400);
  EXPECT_EQ(engine.kv().num_free_blocks(), engine.kv().num_blocks()) << "blocks leaked";
  ASSERT_EQ(session.messages().size(), 3u);
  EXPECT_EQ(session.messages()[2]["content"].get<std::string>(), streamed);

  const ChatTurnStats dropped = session.send("Go on.", {}, [] { return true; });
  EXPECT_EQ(dropped.finish_reason, FinishReason::Abort);
  EXPECT_EQ(dropped.generated_tokens, 0);
  EXPECT_EQ(session.messages().size(), 3u) << "a turn stopped before its first token is not kept";

  const ChatTurnStats next = session.send("Go on.", {});
  EXPECT_NE(next.finish_reason, FinishReason::Abort);
  const int64_t block = config.block_size;
  EXPECT_GE(next.cached_tokens, cut.prompt_tokens / block * block) << "the cut turn's blocks are reused";
  EXPECT_EQ(session.messages().size(), 5u);
}

TEST(ChatTemplateLoad, BuiltinNamesFilesAndTheModelsOwn) {
  const auto model = Model::load(test::shared_model_path("stories260K.gguf"));
  EXPECT_FALSE(load_chat_template("", model->file()).has_value());  // stories260K has none
  EXPECT_TRUE(load_chat_template("chatml", model->file()).has_value());
  const std::string path = test::scratch_dir("chat_template_load") + "/t.jinja";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("{% for m in messages %}{{ m['content'] }}{% endfor %}", f);
    std::fclose(f);
  }
  const auto from_file = load_chat_template(path, model->file());
  ASSERT_TRUE(from_file.has_value());
  EXPECT_EQ(from_file->render(nlohmann::ordered_json::parse(R"([{"role":"user","content":"hi"}])")), "hi");
  try {
    load_chat_template("no-such-template", model->file());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chatml"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kestrel
