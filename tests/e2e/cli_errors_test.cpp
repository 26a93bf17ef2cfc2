// Bad command lines, as a user mistypes them: every number is range-checked and every input file
// checked, each mistake is one "error: ..." line naming the option, and the exit status is 2 (a
// bad command line, found before any model loads) or 1 (found while running: an empty file, a
// duplicate custom_id) - never a crash, a hang, 0, or a 300-digit figure.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
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
const std::string kText = test::shared_model_path("text/tinystories_val.txt");

int lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

struct BadArgs {
  std::string args;    // after "kestrel"
  std::string option;  // the option the message must name
};

void expect_usage_error(const BadArgs& c, bool ours = true) {
  SCOPED_TRACE("kestrel " + c.args);
  const CommandResult r = run_kestrel(c.args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("error: " + c.option + ": ", 0), 0u) << r.err;
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_LT(r.err.size(), 240u) << "no absurd figure: " << r.err;
  if (ours) {
    EXPECT_NE(r.err.find("(got "), std::string::npos) << "the message shows the value: " << r.err;
  }
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(CliErrors, NumbersOutOfRangeAreOneLineNamingTheOption) {
  const std::string m = kStories;
  const std::vector<BadArgs> cases = {
      // Negative.
      {"run " + m + " -n -5", "--n-predict"},
      {"chat " + m + " -n -1", "--n-predict"},
      {"perplexity " + m + " -f " + kText + " --chunks -2", "--chunks"},
      {"eval " + m + " " + m + " -f " + kText + " --chunks -1", "--chunks"},
      {"bench " + m + " --reps -1", "--reps"},
      {"run " + m + " --seed -2", "--seed"},
      // Zero where zero means nothing.
      {"run " + m + " -t 0", "--threads"},
      {"info " + m + " --budget-gib 0", "--budget-gib"},
      {"imatrix " + m + " -f " + kText + " --chunks 0", "--chunks"},
      {"quantize " + m + " /tmp/never.gguf Q8_0 -t 0", "--threads"},
      {"perplexity " + m + " -f " + kText + " --attention-sinks 0 --max-tokens 0", "--max-tokens"},
      {"run " + m + " --top-p 0", "--top-p"},
      {"run " + m + " --repeat-penalty 0", "--repeat-penalty"},
      // Past the sensible ends.
      {"run " + m + " --ctx 1", "--ctx"},
      {"run " + m + " --top-p 2", "--top-p"},
      {"chat " + m + " --min-p 1.5", "--min-p"},
      {"run " + m + " --spec-tokens 33", "--spec-tokens"},
      {"run " + m + " --spec-ngram-min 0", "--spec-ngram-min"},
      {"run " + m + " --attention-sinks -1", "--attention-sinks"},
      {"info " + m + " --block-size 4096", "--block-size"},
      {"info " + m + " --budget-gib 1e300", "--budget-gib"},
      {"gen-model --list -t 5000", "--threads"},
      {"bench " + m + " --batch 1,2,5000", "--batch"},
      {"run " + m + " -n 99999999999999999999", "--n-predict"},
      {"perplexity " + m + " -f " + kText + " --max-tokens 99999999999999999999", "--max-tokens"},
      {"run " + m + " --temp 1000", "--temp"},
      // Floats: negative, NaN, infinite.
      {"run " + m + " --temp -1", "--temp"},
      {"run " + m + " --temp nan", "--temp"},
      {"chat " + m + " --top-p inf", "--top-p"},
      {"info " + m + " --kv-memory-fraction nan", "--kv-memory-fraction"},
      {"quantize " + m + " /tmp/never.gguf Q4_K --damp -inf", "--damp"},
      {"run " + m + " --min-p NaN", "--min-p"},
      // Not a number of the kind asked for.
      {"run " + m + " -n ten", "--n-predict"},
      {"perplexity " + m + " -f " + kText + " --ctx 1.5", "--ctx"},
      {"run " + m + " --top-k 2.5", "--top-k"},
  };
  for (const BadArgs& c : cases) expect_usage_error(c);
  // serve's and batch's engine options (tools/server_options.cpp) keep CLI11's Range, with its
  // own wording, in the same one-line form.
  expect_usage_error({"batch " + m + " -i " + kText + " -o /tmp/never.jsonl --kv-blocks 0", "--kv-blocks"},
                     /*ours=*/false);
}

TEST(CliErrors, InBoundsNumbersStillWork) {
  const CommandResult r = run_kestrel("run " + kStories + " -n 3 -t 1 --temp 0 --top-p 1 --min-p 0 --top-k 0 "
                                      "--seed 0 --repeat-penalty 1.1 --ctx 2048");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const CommandResult info = run_kestrel("info " + kStories + " --budget-gib 0.5 --kv-memory-fraction 1");
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("budget "), std::string::npos) << info.out;
}

// A context whose KV cache cannot fit in memory is refused before anything is allocated (the
// default model: 16M tokens of its KV take about 48 GiB).
TEST(CliErrors, ContextLargerThanMemoryIsRefused) {
  const CommandResult r = run_kestrel("run " + test::default_model_path() + " -n 4 --ctx 16777216");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("needs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("give a smaller --ctx"), std::string::npos) << r.err;
  EXPECT_EQ(lines(r.err), 1) << r.err;
}

// Numbers each in range but at odds with each other: the message names both options.
TEST(CliErrors, ConflictingNumbersNameBothOptions) {
  CommandResult r = run_kestrel("perplexity " + kStories + " -f " + kText + " -c 64 --attention-sinks 64");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("error: --attention-sinks 64 must be fewer than the window (--ctx 64)", 0), 0u) << r.err;
  r = run_kestrel("run " + kStories + " --spec ngram --spec-ngram-min 5 --spec-ngram-max 3 -n 2");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err, "error: --spec-ngram-min (5) is larger than --spec-ngram-max (3)\n");
  r = run_kestrel("bench " + kStories + " --spec ngram --tg 0");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("--tg 0"), std::string::npos) << r.err;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

TEST(CliErrors, InputFilesMustExistBeFilesAndHoldSomething) {
  const std::string dir = test::scratch_dir("cli_input_files");
  const std::string missing = dir + "/missing.txt", empty = dir + "/empty.txt", blank = dir + "/blank.jsonl";
  write(empty, "");
  write(blank, "\n  \n\n");
  const std::string m = kStories;
  // Found at parse time, before any model loads: exit 2, the option and the path named.
  for (const auto& [path, problem] : {std::pair{dir, "is a directory, not a file"}, std::pair{missing, "no such file"}}) {
    const std::vector<BadArgs> cases = {
        {"perplexity " + m + " -f " + path, "--file"},
        {"eval " + m + " " + m + " -f " + path, "--file"},
        {"imatrix " + m + " -f " + path, "--file"},
        {"batch " + m + " -i " + path + " -o " + dir + "/out.jsonl", "--input"},
        {"run " + m + " --grammar-file " + path, "--grammar-file"},
        {"run " + m + " --json-schema-file " + path, "--json-schema-file"},
        {"quantize " + m + " " + dir + "/q.gguf Q8_0 --calib " + path, "--calib"},
        {"quantize " + m + " " + dir + "/q.gguf Q8_0 --imatrix " + path, "--imatrix"},
        {"bench " + m + " --spec ngram --prompt-file " + path, "--prompt-file"},
    };
    for (const BadArgs& c : cases) {
      SCOPED_TRACE(c.args);
      const CommandResult r = run_kestrel(c.args);
      EXPECT_EQ(r.exit_code, 2) << r.err;
      EXPECT_EQ(r.err.rfind("error: " + c.option + ": " + path + ": " + problem, 0), 0u) << r.err;
      EXPECT_EQ(lines(r.err), 1) << r.err;
    }
  }
  // An empty file is found when it is read: exit 1, "the file is empty" rather than 0 tokens or
  // 0 requests.
  const std::vector<BadArgs> empties = {
      {"perplexity " + m + " -f " + empty, "--file"},
      {"eval " + m + " " + m + " -f " + empty, "--file"},
      {"imatrix " + m + " -f " + empty + " -o " + dir + "/imatrix.gguf", "--file"},
      {"batch " + m + " -i " + empty + " -o " + dir + "/out.jsonl", "--input"},
      {"run " + m + " -n 4 --json-schema-file " + empty, "--json-schema-file"},
  };
  for (const BadArgs& c : empties) {
    SCOPED_TRACE(c.args);
    const CommandResult r = run_kestrel(c.args);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.err, "error: " + c.option + " " + empty + ": the file is empty\n");
  }
  const CommandResult r = run_kestrel("batch " + m + " -i " + blank + " -o " + dir + "/out.jsonl");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err, "error: --input " + blank + ": no requests (every line is blank)\n");
  EXPECT_FALSE(std::filesystem::exists(dir + "/out.jsonl"));
}

TEST(CliErrors, BatchRejectsDuplicateCustomIdsAndReportsBadLinesInTheOutput) {
  const std::string dir = test::scratch_dir("cli_batch_ids");
  write(dir + "/dup.jsonl", R"({"custom_id": "a", "prompt": "Once", "max_tokens": 2})" "\n\n"
                            R"({"custom_id": "b", "prompt": "Once", "max_tokens": 2})" "\n"
                            R"({"custom_id": "a", "prompt": "Tom", "max_tokens": 2})" "\n");
  CommandResult r = run_kestrel("batch " + kStories + " -i " + dir + "/dup.jsonl -o " + dir + "/dup_out.jsonl");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err, "error: --input " + dir + "/dup.jsonl: custom_id 'a' is on line 1 and line 4\n");
  EXPECT_FALSE(std::filesystem::exists(dir + "/dup_out.jsonl"));

  // Lines that are JSON but no request object: an error line each, the rest of the batch runs.
  write(dir + "/mixed.jsonl", "5\n"
                              R"({"custom_id": "typed", "url": 5, "prompt": "Once"})" "\n"
                              "{not json\n"
                              R"({"custom_id": "ok", "prompt": "Once upon a time", "max_tokens": 3})" "\n");
  r = run_kestrel("batch " + kStories + " -i " + dir + "/mixed.jsonl -o " + dir + "/mixed_out.jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream out(dir + "/mixed_out.jsonl");
  std::vector<nlohmann::json> results;
  for (std::string line; std::getline(out, line);) results.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0]["custom_id"], "line-1");
  EXPECT_NE(results[0]["error"]["message"].get<std::string>().find("not a JSON object"), std::string::npos);
  EXPECT_EQ(results[1]["custom_id"], "typed");
  EXPECT_FALSE(results[1]["error"].is_null());
  EXPECT_NE(results[2]["error"]["message"].get<std::string>().find("malformed JSON"), std::string::npos);
  EXPECT_EQ(results[3]["custom_id"], "ok");
  EXPECT_TRUE(results[3]["error"].is_null()) << results[3];
}

}  // namespace
}  // namespace kestrel
