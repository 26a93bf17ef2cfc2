// Ctrl-C (SIGINT) to `kestrel run` and `kestrel chat`, sent to the live process once it has
// started to generate. Every wait has a deadline: a process that ignores the signal fails the
// test (and is killed) instead of hanging CI.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <string>

#include "cli_process.h"
#include "test_paths.h"

namespace kestrel {
namespace {

using namespace std::chrono_literals;
using test::KestrelProcess;

const std::string kStories = test::shared_model_path("stories260K.gguf");

// run stops generating, still prints the newline and its timing line, and exits 130.
TEST(CliInterrupt, RunStopsPrintsItsStatsAndExits130) {
  // A rolling window with sinks: generation would go on for 16M tokens.
  KestrelProcess p({"run", kStories, "-p", "Once upon a time", "-n", "16000000", "--ctx", "64", "--attention-sinks",
                    "4", "--ignore-eos", "--temp", "0", "-t", "1"});
  ASSERT_TRUE(p.started());
  ASSERT_TRUE(p.read_until([&] { return p.out().size() >= 20; }, 120s)) << "no output: " << p.err();
  p.signal(SIGINT);
  ASSERT_TRUE(p.wait_exit(10s)) << "still running 10 s after Ctrl-C";
  EXPECT_EQ(p.exit_code(), 130) << p.err();
  EXPECT_EQ(p.term_signal(), 0);
  ASSERT_FALSE(p.out().empty());
  EXPECT_EQ(p.out().back(), '\n');
  int prompt_tokens = -1, gen_tokens = -1;
  double prompt_rate = 0, gen_rate = 0;
  const size_t at = p.err().find("prompt: ");
  ASSERT_NE(at, std::string::npos) << p.err();
  ASSERT_EQ(std::sscanf(p.err().c_str() + at, "prompt: %d tokens, %lf tok/s; generation: %d tokens, %lf tok/s",
                        &prompt_tokens, &prompt_rate, &gen_tokens, &gen_rate),
            4)
      << p.err();
  EXPECT_GT(gen_tokens, 0);
  EXPECT_LT(gen_tokens, 16000000);
  EXPECT_NE(p.err().find("kestrel: interrupted after " + std::to_string(gen_tokens) + " tokens"), std::string::npos)
      << p.err();
}

// chat: Ctrl-C during a reply stops that reply only; the next prompt is answered (reusing the
// cut turn's blocks) and end of input ends the chat with status 0.
TEST(CliInterrupt, ChatStopsTheReplyNotTheConversation) {
  // Greedy stories260K runs this reply to its 2000-token cap (seconds), so the signal lands in it.
  KestrelProcess p({"chat", kStories, "--chat-template", "chatml", "-n", "2000", "--temp", "0", "-t", "1",
                    "--verbose"});
  ASSERT_TRUE(p.started());
  p.write_stdin("Tell me a story.\n");
  ASSERT_TRUE(p.read_until([&] { return p.out().size() >= 8; }, 120s)) << "no reply: " << p.err();
  p.signal(SIGINT);
  // The turn's statistics, then the notice: wait for the notice's end.
  ASSERT_TRUE(p.read_until([&] { return p.err().find("Ctrl-D ends the chat\n") != std::string::npos; }, 10s))
      << "the reply did not stop: " << p.err();
  EXPECT_NE(p.err().find("kestrel: reply interrupted (the part shown stays in the conversation)"), std::string::npos)
      << p.err();
  EXPECT_NE(p.err().find("; abort]"), std::string::npos) << p.err();
  const size_t first_reply = p.out().size();

  p.write_stdin("What happened next?\n");
  ASSERT_TRUE(p.read_until([&] { return p.err().find("[turn 2:") != std::string::npos; }, 120s))
      << "the next prompt was not answered: " << p.err();
  EXPECT_GT(p.out().size(), first_reply);
  long long prompt = 0, reused = 0;
  const size_t at = p.err().find("[turn 2:");
  ASSERT_EQ(std::sscanf(p.err().c_str() + at, "[turn 2: prompt %lld tokens (%lld reused", &prompt, &reused), 2);
  EXPECT_GE(reused, 16) << p.err();

  p.close_stdin();
  ASSERT_TRUE(p.wait_exit(10s)) << "end of input did not end the chat";
  EXPECT_EQ(p.exit_code(), 0) << p.err();
}

// chat: Ctrl-C at the prompt ends the chat (status 0), as end of input does.
TEST(CliInterrupt, ChatCtrlCAtThePromptEnds) {
  KestrelProcess p({"chat", kStories, "--chat-template", "chatml", "-n", "4", "--temp", "0", "-t", "1", "--verbose"});
  ASSERT_TRUE(p.started());
  p.write_stdin("Hi.\n");
  ASSERT_TRUE(p.read_until([&] { return p.err().find("[turn 1:") != std::string::npos; }, 120s)) << p.err();
  p.signal(SIGINT);
  ASSERT_TRUE(p.wait_exit(10s)) << "Ctrl-C at the prompt did not end the chat";
  EXPECT_EQ(p.exit_code(), 0) << p.err();
}

}  // namespace
}  // namespace kestrel
