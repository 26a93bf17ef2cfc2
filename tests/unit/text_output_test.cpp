// TextOutput: stop strings are never emitted, even when split across tokens; held-back text is
// released when it can no longer start a stop string, and at the end.
#include <gtest/gtest.h>

#include "engine/text_output.h"
#include "loader/gguf_reader.h"
#include "test_paths.h"

namespace kestrel {
namespace {

class TextOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = gguf::GgufFile::open(test::shared_model_path("stories260K.gguf"));
    tokenizer_ = Tokenizer::from_gguf(*file_);
  }
  // Feeds the tokens of `text` one by one; returns the released chunks.
  std::vector<std::string> feed(const std::string& text, std::vector<std::string> stop, TextOutput** out) {
    const auto ids = tokenizer_->encode(text, false, false);
    output_ = std::make_unique<TextOutput>(*tokenizer_, tokenizer_->bos_id(), std::move(stop));
    std::vector<std::string> chunks;
    for (TokenId id : ids) {
      chunks.push_back(output_->push(id));
      if (output_->stopped()) break;
    }
    if (!output_->stopped()) chunks.push_back(output_->finish());
    *out = output_.get();
    return chunks;
  }
  static std::string join(const std::vector<std::string>& chunks) {
    std::string s;
    for (const auto& c : chunks) s += c;
    return s;
  }

  std::unique_ptr<gguf::GgufFile> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<TextOutput> output_;
};

TEST_F(TextOutputTest, NoStopStringsReleasesEverything) {
  TextOutput* out;
  EXPECT_EQ(join(feed("Once upon a time, there was a dog.", {}, &out)), "Once upon a time, there was a dog.");
  EXPECT_FALSE(out->stopped());
}

TEST_F(TextOutputTest, StopStringSpanningTokensIsCutAndNotEmitted) {
  TextOutput* out;
  const auto chunks = feed("Once upon a time, there was a dog.", {"me, the"}, &out);
  EXPECT_TRUE(out->stopped());
  EXPECT_EQ(out->matched_stop(), "me, the");
  EXPECT_EQ(join(chunks), "Once upon a ti");
  for (const auto& c : chunks) EXPECT_EQ(c.find("me, the"), std::string::npos);
}

TEST_F(TextOutputTest, EarliestOfSeveralStopStringsWins) {
  TextOutput* out;
  const auto chunks = feed("Once upon a time, there was a dog.", {"dog", "upon"}, &out);
  EXPECT_EQ(join(chunks), "Once ");
  EXPECT_EQ(out->matched_stop(), "upon");
}

TEST_F(TextOutputTest, PartialMatchIsHeldThenReleased) {
  TextOutput* out;
  // "time!" never completes: "time" is held while it might, then released.
  const auto chunks = feed("Once upon a time, there was", {"time!"}, &out);
  EXPECT_FALSE(out->stopped());
  EXPECT_EQ(join(chunks), "Once upon a time, there was");
}

TEST_F(TextOutputTest, PrefixOfStopAtTheVeryEndIsReleasedByFinish) {
  TextOutput* out;
  const auto chunks = feed("It was a big do", {"dog"}, &out);
  EXPECT_FALSE(out->stopped());
  EXPECT_EQ(chunks.back().substr(chunks.back().size() - 2), "do") << "held 'do' comes out at finish";
  EXPECT_EQ(join(chunks), "It was a big do");
}

}  // namespace
}  // namespace kestrel
