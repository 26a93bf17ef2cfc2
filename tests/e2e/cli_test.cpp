// The `kestrel` binary as a user runs it: output streams, the timing line, exit codes and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <map>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_process.h"
#include "test_paths.h"

namespace kestrel {
namespace {

using test::CommandResult;
using test::run_kestrel;

const std::string kStories = test::shared_model_path("stories260K.gguf");

TEST(Cli, RunGreedyFromEmptyPromptPrintsDocumentedStory) {
  const CommandResult r = run_kestrel("run " + kStories + " -n 200 --temp 0 -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
            "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.\n"
            "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do. "
            "She said, \"I want to play with your ball, but I can't find it.\"\n"
            "Lily was sad and didn't know what to do. She said, \"I'm sorry, Lily. I didn't know what "
            "to do.\"\n"
            "Lily didn't want to help her mom, so she\n");
  double prompt_rate = -1, gen_rate = -1;
  int prompt_tokens = -1, gen_tokens = -1;
  ASSERT_EQ(std::sscanf(r.err.c_str(), "prompt: %d tokens, %lf tok/s; generation: %d tokens, %lf tok/s",
                        &prompt_tokens, &prompt_rate, &gen_tokens, &gen_rate),
            4)
      << r.err;
  EXPECT_EQ(prompt_tokens, 1);
  EXPECT_EQ(gen_tokens, 200);
  EXPECT_GT(gen_rate, 0.0);
}

TEST(Cli, RunDoesNotEchoThePromptAndKeepsTheLeadingSpace) {
  const CommandResult r = run_kestrel("run " + kStories + " -p \"Once upon a time\" -n 8 --temp 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind(", there was a little girl", 0), 0u) << r.out;
}

// Structured output from the command line: run and batch (a batch line's own constraint wins
// over the command line's), checked by an independent parser; a bad constraint is one clear line.
TEST(Cli, RunAndBatchFollowAGrammar) {
  const std::string dir = test::scratch_dir("cli_grammar");
  CommandResult r = run_kestrel("run " + kStories + " -p \"Once upon a time\" -n 300 --seed 5 --json-schema "
                                "'{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\", \"minimum\": 0, "
                                "\"maximum\": 9}}, \"required\": [\"n\"]}'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_TRUE(j["n"].is_number_integer() && j["n"] >= 0 && j["n"] <= 9) << r.out;

  // --json-schema FILE (the issue's spelling) as well as inline.
  {
    std::ofstream schema(dir + "/schema.json");
    schema << R"({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})";
  }
  r = run_kestrel("run " + kStories + " -p \"Once upon a time\" -n 300 --seed 5 --json-schema " + dir + "/schema.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json from_file = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_TRUE(from_file.is_object() && from_file.size() == 1 && from_file["ok"].is_boolean()) << r.out;

  r = run_kestrel("run " + kStories + " -p x -n 8 --regex '(ab'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("error: invalid regex: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  {
    std::ofstream in(dir + "/requests.jsonl");
    in << R"({"custom_id": "a", "prompt": "Once upon a time", "max_tokens": 40, "seed": 1})" << "\n"
       << R"({"custom_id": "b", "prompt": "Once upon a time", "max_tokens": 40, "seed": 2, "guided_choice": ["red", "blue"]})" << "\n";
  }
  r = run_kestrel("batch " + kStories + " -i " + dir + "/requests.jsonl -o " + dir + "/results.jsonl --regex '[0-9]{2}-[a-z]{1,6}'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream out(dir + "/results.jsonl");
  std::string line;
  std::map<std::string, std::string> text;
  while (std::getline(out, line)) {
    const nlohmann::json result = nlohmann::json::parse(line);
    text[result["custom_id"]] = result["response"]["body"]["choices"][0]["text"];
  }
  ASSERT_EQ(text.size(), 2u);
  const std::string& a = text["a"];
  EXPECT_TRUE(a.size() >= 4 && a.size() <= 9 && std::isdigit(a[0]) && std::isdigit(a[1]) && a[2] == '-' &&
              std::all_of(a.begin() + 3, a.end(), [](char c) { return c >= 'a' && c <= 'z'; }))
      << a;
  EXPECT_TRUE(text["b"] == "red" || text["b"] == "blue") << text["b"];
}

TEST(Cli, SameSeedSameText) {
  const std::string args = "run " + kStories + " -p \"Tom\" -n 40 --temp 1.0 --seed 1234";
  const CommandResult a = run_kestrel(args);
  const CommandResult b = run_kestrel(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  const CommandResult c = run_kestrel("run " + kStories + " -p \"Tom\" -n 40 --temp 1.0 --seed 99");
  EXPECT_NE(a.out, c.out);
}

TEST(Cli, InfoShowsArchitectureAndMemoryPlan) {
  const CommandResult r = run_kestrel("info " + kStories + " --budget-gib 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("architecture:    llama"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("parameters:      292800"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("48 x F32"), std::string::npos) << r.out;
  // 5 layers x 4 KV heads x 8 values x 2 (K and V), F16 by default: 640 bytes.
  EXPECT_NE(r.out.find("KV cache per token: 640.00 B (f16 K and V"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("KV blocks"), std::string::npos) << r.out;
  // Every type's cost, and the ones the head size (8) cannot hold.
  EXPECT_NE(r.out.find("q8_0   head size 8 is not a multiple of 32: not usable"), std::string::npos) << r.out;
  const CommandResult f32 = run_kestrel("info " + kStories + " --budget-gib 1 --kv-type f32");
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  EXPECT_NE(f32.out.find("KV cache per token: 1.25 KiB (f32 K and V"), std::string::npos) << f32.out;
}

TEST(Cli, SpeculativeAndSamplingOptionErrorsAreClear) {
  const CommandResult missing = run_kestrel("run " + kStories + " -n 4 --draft-model /nonexistent/draft.gguf");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("draft model: "), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("/nonexistent/draft.gguf"), std::string::npos) << missing.err;
  const CommandResult mismatch = run_kestrel("run " + kStories + " -n 4 --draft-model " + test::default_model_path());
  EXPECT_EQ(mismatch.exit_code, 1);
  EXPECT_NE(mismatch.err.find("the draft model's vocabulary has 262144 tokens but the target's has 512"), std::string::npos)
      << mismatch.err;
  const CommandResult no_model = run_kestrel("run " + kStories + " -n 4 --spec draft");
  EXPECT_EQ(no_model.exit_code, 1);
  EXPECT_NE(no_model.err.find("--spec draft needs --draft-model"), std::string::npos) << no_model.err;
  // Out-of-range sampling numbers are refused while parsing (cli_errors_test.cpp has the rest).
  const CommandResult temp = run_kestrel("run " + kStories + " -n 4 --temp -1");
  EXPECT_EQ(temp.exit_code, 2);
  EXPECT_EQ(temp.err.rfind("error: --temp: must be a number >= 0 and <= 100 (got -1)", 0), 0u) << temp.err;
  const CommandResult penalty = run_kestrel("run " + kStories + " -n 4 --repeat-penalty 0");
  EXPECT_EQ(penalty.exit_code, 2);
  EXPECT_EQ(penalty.err.rfind("error: --repeat-penalty: must be a number > 0 and <= 100 (got 0)", 0), 0u)
      << penalty.err;
  // A larger draft than the target: a warning, and generation goes on.
  const CommandResult larger = run_kestrel("run " + kStories + " -n 8 --temp 0 --draft-model " + kStories);
  EXPECT_EQ(larger.exit_code, 0) << larger.err;
  EXPECT_NE(larger.err.find("warning: the draft model"), std::string::npos) << larger.err;
  EXPECT_NE(larger.err.find("speculative (draft)"), std::string::npos) << larger.err;
  const CommandResult off = run_kestrel("run " + kStories + " -n 8 --temp 0 --spec ngram --spec-tokens 0");
  EXPECT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(off.err.find("speculative"), std::string::npos) << off.err;
}

TEST(Cli, KvTypeErrorsListTheTypesOrNameTheHeadSize) {
  const CommandResult unknown = run_kestrel("run " + kStories + " -n 4 --kv-type q3_k");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("unknown KV cache type 'q3_k' (choose one of: f32, f16, bf16, fp8, q8_0, q4_0)"),
            std::string::npos) << unknown.err;
  const CommandResult head = run_kestrel("run " + kStories + " -n 4 --kv-type-v q4_0");
  EXPECT_EQ(head.exit_code, 1);
  EXPECT_NE(head.err.find("q4_0 stores 32 values per block, but this model's head size is 8"), std::string::npos)
      << head.err;
  const CommandResult sinks = run_kestrel("run " + kStories + " -n 4 --ctx 64 --attention-sinks 64");
  EXPECT_EQ(sinks.exit_code, 1);
  EXPECT_NE(sinks.err.find("--attention-sinks 64 must be fewer than the window"), std::string::npos) << sinks.err;
}

// The KL divergence of a cache against itself is exactly 0 (same run, same chunks, same kernels);
// F16 K/V against F32 is small but not 0.
TEST(Cli, PerplexityKlDivergenceAgainstABaseKvType) {
  const std::string common = "perplexity " + kStories + " -f " + test::shared_model_path("text/tinystories_val.txt") +
                             " --ctx 128 --chunks 4 --json";
  const CommandResult same = run_kestrel(common + " --kv-type f32 --kld-kv-type f32");
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_NE(same.out.find("\"kld_mean\":0.0"), std::string::npos) << same.out;
  EXPECT_NE(same.out.find("\"top1_agreement\":1.0"), std::string::npos) << same.out;
  const CommandResult f16 = run_kestrel(common + " --kld-kv-type f32");
  ASSERT_EQ(f16.exit_code, 0) << f16.err;
  const size_t at = f16.out.find("\"kld_mean\":");
  ASSERT_NE(at, std::string::npos) << f16.out;
  const double kld = std::atof(f16.out.c_str() + at + 11);
  EXPECT_GT(kld, 0.0) << f16.out;
  EXPECT_LT(kld, 1e-4) << f16.out;
  EXPECT_NE(f16.out.find("Mean    KLD:"), std::string::npos) << f16.out;
}

// Streaming a text through a rolling window with attention sinks runs past the window and scores
// every token after it.
TEST(Cli, PerplexityStreamsThroughARollingWindow) {
  const CommandResult r = run_kestrel("perplexity " + kStories + " -f " +
                                      test::shared_model_path("text/tinystories_val.txt") +
                                      " --ctx 64 --attention-sinks 4 --max-tokens 600");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  double ppl = 0, error = 0;
  long scored = 0;
  const size_t at = r.out.find("Final estimate: PPL = ");
  ASSERT_NE(at, std::string::npos) << r.out;
  ASSERT_EQ(std::sscanf(r.out.c_str() + at, "Final estimate: PPL = %lf +/- %lf (streamed, %ld tokens scored)", &ppl,
                        &error, &scored),
            3)
      << r.out;
  EXPECT_EQ(scored, 600 - 64);
  EXPECT_GT(ppl, 1.0);
  EXPECT_LT(ppl, 20.0);
}

// `run` sizes its pool for one streaming sequence: with 4 sinks (not a whole block) it generates 8x
// its 64-token window past the context and reports every token.
TEST(Cli, RunGeneratesPastTheWindowWithAttentionSinks) {
  const CommandResult r = run_kestrel("run " + kStories + " -p \"Once upon a time\" -n 512 --ctx 64 "
                                      "--attention-sinks 4 --ignore-eos --temp 0 --timings");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("generation: 512 tokens"), std::string::npos) << r.err;
}

TEST(Cli, PerplexityPrintsLlamaCppStyleFinalEstimate) {
  const CommandResult r = run_kestrel("perplexity " + kStories + " -f " +
                                      test::shared_model_path("text/tinystories_val.txt") +
                                      " --ctx 512 --chunks 4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // llama-perplexity -c 512 --chunks 4 on the same file prints [1]3.3979,[2]3.7500,[3]3.5265,[4]3.5313.
  EXPECT_NE(r.out.find("[1]3.39"), std::string::npos) << r.out;
  const size_t at = r.out.find("Final estimate: PPL = ");
  ASSERT_NE(at, std::string::npos) << r.out;
  double ppl = 0, error = 0;
  ASSERT_EQ(std::sscanf(r.out.c_str() + at, "Final estimate: PPL = %lf +/- %lf", &ppl, &error), 2);
  EXPECT_NEAR(ppl, 3.5313, 3.5313 * 0.005);  // llama.cpp's 4-chunk figure
  EXPECT_GT(error, 0.0);
}

TEST(Cli, ErrorsAreOneClearLineAndExitCodeOne) {
  const CommandResult missing = run_kestrel("run /nonexistent.gguf -n 4");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("error: /nonexistent.gguf: cannot open"), std::string::npos) << missing.err;

  const CommandResult not_gguf = run_kestrel("info " + test::shared_model_path("tok512.bin"));
  EXPECT_EQ(not_gguf.exit_code, 1);
  EXPECT_NE(not_gguf.err.find("not a GGUF file"), std::string::npos) << not_gguf.err;

  const CommandResult too_long = run_kestrel("run " + kStories + " -n 100 --ctx 50 --temp 0");
  EXPECT_EQ(too_long.exit_code, 1);
  EXPECT_NE(too_long.err.find("more than the context length 50"), std::string::npos) << too_long.err;

  const CommandResult bad_flag = run_kestrel("run " + kStories + " --top-p 3");
  EXPECT_EQ(bad_flag.exit_code, 2);
  const CommandResult unknown = run_kestrel("run " + kStories + " --no-such-option");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(std::count(unknown.err.begin(), unknown.err.end(), '\n'), 1) << unknown.err;
  EXPECT_NE(unknown.err.find("kestrel run --help"), std::string::npos) << unknown.err;
}

// `kestrel chat` driven through a pipe: one turn per line, replies on stdout, per-turn statistics
// with --verbose, /clear and /exit.
std::string chat_input(const std::string& name, const std::string& lines) {
  const std::string path = test::scratch_dir(name) + "/input.txt";
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return "/dev/null";
  std::fputs(lines.c_str(), f);
  std::fclose(f);
  return path;
}

TEST(Cli, ChatPipedTurnsReuseTheConversationAndObeyClearAndExit) {
  const std::string chat = "chat " + kStories + " --chat-template chatml -n 24 --temp 0 -t 2 -c 256 --verbose";
  const CommandResult one = run_kestrel(chat + " < " + chat_input("chat_one", "Tell me a story.\n"));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ASSERT_FALSE(one.out.empty());
  EXPECT_EQ(one.out.back(), '\n');

  const CommandResult r = run_kestrel(
      chat + " < " +
      chat_input("chat_turns", "Tell me a story.\nWhat happened next?\n/clear\nTell me a story.\n/exit\nNever sent.\n"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Greedy: the first turn after /clear replies as the very first turn did.
  EXPECT_EQ(r.out.rfind(one.out, 0), 0u) << r.out;
  ASSERT_GT(r.out.size(), 2 * one.out.size());
  EXPECT_EQ(r.out.substr(r.out.size() - one.out.size()), one.out) << r.out;
  // Three turns ran (/exit stopped the fourth); the second reused the first turn's blocks.
  std::vector<long long> reused;
  for (size_t at = r.err.find("[turn "); at != std::string::npos; at = r.err.find("[turn ", at + 1)) {
    int turn = 0;
    long long prompt = 0, cached = 0;
    ASSERT_EQ(std::sscanf(r.err.c_str() + at, "[turn %d: prompt %lld tokens (%lld reused", &turn, &prompt, &cached), 3)
        << r.err;
    reused.push_back(cached);
  }
  ASSERT_EQ(reused.size(), 3u) << r.err;
  EXPECT_EQ(reused[0], 0);
  EXPECT_GE(reused[1], 32) << r.err;
}

TEST(Cli, ChatErrorsNameTheFix) {
  const CommandResult no_template = run_kestrel("chat " + kStories + " < /dev/null");
  EXPECT_EQ(no_template.exit_code, 1);
  EXPECT_NE(no_template.err.find("no chat template"), std::string::npos) << no_template.err;
  EXPECT_NE(no_template.err.find("--chat-template"), std::string::npos) << no_template.err;

  // A 64-token context fills within a few turns: a clear message, then /clear recovers.
  const CommandResult full = run_kestrel(
      "chat " + kStories + " --chat-template chatml -n 16 --temp 0 -t 2 -c 64 < " +
      chat_input("chat_full", "Tell me a story.\nMore.\nMore.\nMore.\nMore.\n/clear\nHi.\n"));
  EXPECT_EQ(full.exit_code, 0) << full.err;
  EXPECT_NE(full.err.find("but the context holds 64; /clear starts a new conversation"), std::string::npos)
      << full.err;
  EXPECT_EQ(full.out.find("error"), std::string::npos);
}

}  // namespace
}  // namespace kestrel
