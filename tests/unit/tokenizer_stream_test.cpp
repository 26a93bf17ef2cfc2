// StreamingDetokenizer: whole UTF-8 characters only, the same text as decode(), and SentencePiece's
// leading-space rule around BOS.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loader/gguf_reader.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

// Strict check: every lead byte is followed by exactly its continuation bytes.
bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = uint8_t(s[i]);
    size_t length = 0;
    if (lead < 0x80) length = 1;
    else if ((lead & 0xe0) == 0xc0) length = 2;
    else if ((lead & 0xf0) == 0xe0) length = 3;
    else if ((lead & 0xf8) == 0xf0) length = 4;
    else return false;
    if (i + length > s.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      if ((uint8_t(s[i + k]) & 0xc0) != 0x80) return false;
    }
    i += length;
  }
  return true;
}

const Tokenizer& tokenizer_named(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) {
    if (name == "llama3") {
      slot = Tokenizer::from_tiktoken_llama3(test::shared_model_path("llama3/tokenizer.model"));
    } else {
      slot = Tokenizer::from_gguf(*gguf::GgufFile::open(test::shared_model_path(name)));
    }
  }
  return *slot;
}

// Texts with multi-byte characters split over several tokens (from the llama.cpp vectors).
const std::vector<std::string> kTexts = {
    "ied 4 ½ months",
    " this is 🦙.cpp",
    "нещо на Български",
    "កាន់តែពិសេសអាចខលចេញ",
    "🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own token)",
    "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",
    "Cửa Việt",
    "\n \n\n \t\t \t\n  \n",
};

void check_streaming(const std::string& name) {
  const Tokenizer& tokenizer = tokenizer_named(name);
  for (const std::string& text : kTexts) {
    const std::vector<TokenId> ids = tokenizer.encode(text, false, false);
    StreamingDetokenizer stream(tokenizer);
    std::string streamed;
    for (const TokenId id : ids) {
      const std::string chunk = stream.push(id);
      EXPECT_TRUE(is_valid_utf8(chunk)) << name << ": partial character emitted for '" << text << "'";
      streamed += chunk;
    }
    EXPECT_EQ(stream.flush(), "");
    EXPECT_EQ(streamed, tokenizer.decode(ids, false)) << name;
    EXPECT_EQ(streamed, text) << name;
  }
}

TEST(StreamingDetokenizer, LlamaSpmWholeCharacters) { check_streaming("llama.cpp-vocab/ggml-vocab-llama-spm.gguf"); }
TEST(StreamingDetokenizer, Gpt2WholeCharacters) { check_streaming("llama.cpp-vocab/ggml-vocab-gpt-2.gguf"); }
TEST(StreamingDetokenizer, Llama3WholeCharacters) { check_streaming("llama3"); }

TEST(StreamingDetokenizer, HoldsBytesOfAnIncompleteCharacter) {
  const Tokenizer& spm = tokenizer_named("llama.cpp-vocab/ggml-vocab-llama-spm.gguf");
  // The llama emoji has no token of its own: it is four byte tokens <0xF0><0x9F><0xA6><0x99>.
  const std::vector<TokenId> ids = spm.encode("a\xf0\x9f\xa6\x99", false, false);
  ASSERT_GE(ids.size(), 5u);
  const std::vector<TokenId> emoji(ids.end() - 4, ids.end());
  for (const TokenId id : emoji) ASSERT_EQ(spm.vocab().types[size_t(id)], TokenType::Byte);
  StreamingDetokenizer stream(spm);
  stream.prime(ids[ids.size() - 5]);
  EXPECT_EQ(stream.push(emoji[0]), "");
  EXPECT_EQ(stream.push(emoji[1]), "");
  EXPECT_EQ(stream.push(emoji[2]), "");
  EXPECT_EQ(stream.push(emoji[3]), "\xf0\x9f\xa6\x99");

  StreamingDetokenizer cut(spm);
  cut.prime(ids[ids.size() - 5]);
  EXPECT_EQ(cut.push(emoji[0]), "");
  EXPECT_EQ(cut.push(emoji[1]), "");
  EXPECT_EQ(cut.flush(), "\xf0\x9f") << "flush hands back what is held";
  EXPECT_EQ(cut.flush(), "");
}

TEST(StreamingDetokenizer, SpaceAfterBos) {
  const auto file = gguf::GgufFile::open(test::shared_model_path("stories260K.gguf"));
  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::from_gguf(*file);
  const std::vector<TokenId> ids = tokenizer->encode("Once upon a time", true, false);
  ASSERT_EQ(ids.front(), 1);
  ASSERT_EQ(tokenizer->token_to_piece(ids[1], false).front(), ' ');

  // Generating from a BOS-only prompt: the stream holds BOS and the text starts without a space.
  StreamingDetokenizer from_bos(*tokenizer);
  from_bos.prime(tokenizer->bos_id());
  std::string text;
  for (size_t i = 1; i < ids.size(); ++i) text += from_bos.push(ids[i]);
  EXPECT_EQ(text, "Once upon a time");

  // BOS pushed through the stream behaves the same, and renders when asked.
  StreamingDetokenizer with_bos(*tokenizer);
  text.clear();
  for (const TokenId id : ids) text += with_bos.push(id);
  EXPECT_EQ(text, "Once upon a time");
  StreamingDetokenizer rendering(*tokenizer, /*render_special=*/true);
  text.clear();
  for (const TokenId id : ids) text += rendering.push(id);
  EXPECT_EQ(text, tokenizer->vocab().tokens[1] + "Once upon a time");

  // Continuing a prompt: primed with the prompt's last token, the next word keeps its space.
  const std::vector<TokenId> prompt = tokenizer->encode("Once upon a", true, false);
  StreamingDetokenizer continuing(*tokenizer);
  continuing.prime(prompt.back());
  text.clear();
  for (const TokenId id : tokenizer->encode("time", false, false)) text += continuing.push(id);
  EXPECT_EQ(text, " time");
}

TEST(StreamingDetokenizer, BpeKeepsLeadingSpace) {
  const Tokenizer& llama3 = tokenizer_named("llama3");
  const std::vector<TokenId> ids = llama3.encode(" Hello", true, false);
  StreamingDetokenizer stream(llama3);
  std::string text;
  for (const TokenId id : ids) text += stream.push(id);
  EXPECT_EQ(text, " Hello") << "only SentencePiece adds (and so removes) a leading space";
}

}  // namespace
}  // namespace kestrel
