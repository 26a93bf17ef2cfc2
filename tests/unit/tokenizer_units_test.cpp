// The pieces of the tokenizers on tiny hand-made vocabularies: merge order, byte fallback, the
// GPT-2 byte alphabet and the pre-tokenizer expressions.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/byte_alphabet.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

const std::string kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's space

TEST(ByteAlphabet, RoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  const std::string encoded = tokenizer::bytes_to_alphabet(all);
  bool clean = false;
  EXPECT_EQ(tokenizer::alphabet_to_bytes(encoded, &clean), all);
  EXPECT_TRUE(clean);
  EXPECT_EQ(tokenizer::bytes_to_alphabet(" "), "\xc4\xa0");   // U+0120 'Ġ'
  EXPECT_EQ(tokenizer::bytes_to_alphabet("\n"), "\xc4\x8a");  // U+010A 'Ċ'
  EXPECT_EQ(tokenizer::bytes_to_alphabet("A~"), "A~");
  EXPECT_EQ(tokenizer::byte_to_alphabet_code_point(0xad), 0x143u);  // the last shifted byte
  EXPECT_EQ(tokenizer::alphabet_to_bytes("<|x|>\xe2\x96\x81", &clean), "<|x|>\xe2\x96\x81");
  EXPECT_FALSE(clean) << "U+2581 is not in the alphabet";
}

std::vector<std::string> split(const std::string& pre, const std::string& text) {
  std::vector<std::string_view> words;
  tokenizer::PreTokenizer::for_pre(pre)->split(text, words);
  return {words.begin(), words.end()};
}

using Words = std::vector<std::string>;

TEST(PreTokenizer, Gpt2) {
  EXPECT_EQ(split("gpt-2", "Hello world's  12345 !!x\n\n y"),
            (Words{"Hello", " world", "'s", " ", " 12345", " !!", "x", "\n\n", " y"}));
  EXPECT_EQ(split("gpt-2", "I'M"), (Words{"I", "'", "M"})) << "GPT-2's contractions are lower case";
  EXPECT_EQ(split("gpt-2", "a   "), (Words{"a", "   "}));
}

TEST(PreTokenizer, Llama3AndQwen2) {
  EXPECT_EQ(split("llama-bpe", "I'M 12345 hello!!\n\n  world"),
            (Words{"I", "'M", " ", "123", "45", " hello", "!!\n\n", " ", " world"}));
  EXPECT_EQ(split("llama3", "x\r\n\r\ny"), (Words{"x", "\r\n\r\n", "y"}));
  EXPECT_EQ(split("qwen2", "12345"), (Words{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(split("qwen2", "ab'll"), (Words{"ab", "'ll"}));
}

TEST(PreTokenizer, InvalidUtf8StaysInTheWords) {
  const std::string text = "ab\xff\xfe cd";
  std::string joined;
  for (const auto& word : split("llama-bpe", text)) joined += word;
  EXPECT_EQ(joined, text);
}

TEST(PreTokenizer, UnknownName) {
  EXPECT_THROW(tokenizer::PreTokenizer::for_pre("whatever"), Error);
}

// SentencePiece: pieces "▁", a, b, c, ab, bc, abc with chosen scores.
VocabData spm_vocab(float score_ab, float score_bc) {
  VocabData vocab;
  vocab.kind = VocabKind::SentencePiece;
  vocab.tokens = {"<unk>", "<s>", "</s>", kSpace, "a", "b", "c", "ab", "bc", "<0x78>"};
  vocab.scores = {0, 0, 0, -1, -1, -1, -1, score_ab, score_bc, 0};
  vocab.types = {TokenType::Unknown, TokenType::Control, TokenType::Control, TokenType::Normal,
                 TokenType::Normal,  TokenType::Normal,  TokenType::Normal,  TokenType::Normal,
                 TokenType::Normal,  TokenType::Byte};
  vocab.unk_id = 0;
  vocab.bos_id = 1;
  vocab.eos_id = 2;
  vocab.add_bos = true;
  return vocab;
}

TEST(SpmTokenizer, HighestScoreMergesFirst) {
  const auto prefers_ab = Tokenizer::create(spm_vocab(-0.5f, -0.7f));
  EXPECT_EQ(prefers_ab->encode("abc", false, false), (std::vector<TokenId>{3, 7, 6}));
  const auto prefers_bc = Tokenizer::create(spm_vocab(-0.7f, -0.5f));
  EXPECT_EQ(prefers_bc->encode("abc", false, false), (std::vector<TokenId>{3, 4, 8}));
  const auto tie = Tokenizer::create(spm_vocab(-0.5f, -0.5f));
  EXPECT_EQ(tie->encode("abc", false, false), (std::vector<TokenId>{3, 7, 6})) << "ties: leftmost";
}

TEST(SpmTokenizer, ByteFallbackAndUnknown) {
  const auto tokenizer = Tokenizer::create(spm_vocab(-0.5f, -0.7f));
  // 'x' has a byte token; 'y' has neither token nor byte token, so it becomes <unk>.
  EXPECT_EQ(tokenizer->encode("xy", false, false), (std::vector<TokenId>{3, 9, 0}));
  EXPECT_EQ(tokenizer->decode(std::vector<TokenId>{3, 9, 4}, false), "xa");
  EXPECT_EQ(tokenizer->decode(std::vector<TokenId>{1, 3, 9, 2}, true), "<s>x</s>");
}

TEST(SpmTokenizer, SpacePrefixRules) {
  const auto tokenizer = Tokenizer::create(spm_vocab(-0.5f, -0.7f));
  EXPECT_EQ(tokenizer->encode("a b", true, false), (std::vector<TokenId>{1, 3, 4, 3, 5}));
  EXPECT_EQ(tokenizer->decode(std::vector<TokenId>{1, 3, 4, 3, 5}, false), "a b");
  // After a special token the dummy space is added again (llama.cpp's rule).
  EXPECT_EQ(tokenizer->encode("a<s>b", false, true), (std::vector<TokenId>{3, 4, 1, 3, 5}));

  VocabData no_prefix = spm_vocab(-0.5f, -0.7f);
  no_prefix.add_space_prefix = false;
  const auto plain = Tokenizer::create(no_prefix);
  EXPECT_EQ(plain->encode("a b", false, false), (std::vector<TokenId>{4, 3, 5}));
  EXPECT_EQ(plain->decode(std::vector<TokenId>{3, 4}, false), " a") << "no prefix, nothing stripped";
}

// Byte-level BPE with a merges list: ranks, not position, decide the order.
TEST(BpeTokenizer, MergesByRank) {
  VocabData vocab;
  vocab.kind = VocabKind::BytePairEncoding;
  vocab.pre = "gpt-2";
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += char(b);
  for (int b = 0; b < 256; ++b) {
    vocab.tokens.push_back(tokenizer::bytes_to_alphabet(all_bytes.substr(size_t(b), 1)));
  }
  const std::string space = tokenizer::bytes_to_alphabet(" ");
  vocab.tokens.push_back(space + "t");       // 256
  vocab.tokens.push_back("he");              // 257
  vocab.tokens.push_back(space + "the");     // 258
  vocab.tokens.push_back("th");              // 259
  vocab.tokens.push_back("<|endoftext|>");   // 260
  vocab.types.assign(vocab.tokens.size(), TokenType::Normal);
  vocab.types[260] = TokenType::Control;
  vocab.eos_id = 260;
  vocab.merges = {space + " t", "h e", space + "t he", "t h"};
  const auto tokenizer = Tokenizer::create(vocab);
  EXPECT_EQ(tokenizer->encode(" the", false, false), std::vector<TokenId>{258});
  // "the": h+e (rank 1) beats t+h (rank 3), and "t he" is no merge.
  EXPECT_EQ(tokenizer->encode("the", false, false), (std::vector<TokenId>{'t', 257}));
  EXPECT_EQ(tokenizer->encode("the<|endoftext|>", false, true), (std::vector<TokenId>{'t', 257, 260}));
  EXPECT_EQ(tokenizer->decode(std::vector<TokenId>{258, 260}, false), " the");
  EXPECT_EQ(tokenizer->decode(std::vector<TokenId>{258, 260}, true), " the<|endoftext|>");
  EXPECT_EQ(tokenizer->token_to_piece(256, false), " t");
  EXPECT_TRUE(tokenizer->is_end_of_generation(260));
  EXPECT_EQ(tokenizer->find_token("he"), 257);
  EXPECT_EQ(tokenizer->find_token("nope"), -1);
}

// SentencePiece-style BPE (Gemma 4's pre): raw UTF-8 tokens with U+2581 for a space, merges over
// characters, <0xNN> tokens for characters the vocabulary lacks, newline runs as whole tokens.
TEST(BpeTokenizer, RawUtf8WithByteFallback) {
  VocabData vocab;
  vocab.kind = VocabKind::BytePairEncoding;
  vocab.pre = "gemma4";
  vocab.tokens = {"<0xE2>", "<0x98>", "<0x83>", kSpace, "a", "b", "ab", kSpace + "ab", "\n",
                  "\n\n"};
  vocab.types.assign(vocab.tokens.size(), TokenType::Normal);
  vocab.types[0] = vocab.types[1] = vocab.types[2] = TokenType::Byte;
  vocab.merges = {"a b", kSpace + " ab"};
  const auto tokenizer = Tokenizer::create(vocab);
  EXPECT_EQ(tokenizer->encode(" ab", false, false), std::vector<TokenId>{7});
  // U+2603 is no token: its three bytes fall back to <0xNN>. "\n\n" is a token of its own.
  EXPECT_EQ(tokenizer->encode("ab\xe2\x98\x83\n\nb", false, false),
            (std::vector<TokenId>{6, 0, 1, 2, 9, 5}));
  EXPECT_EQ(tokenizer->decode(std::vector<TokenId>{7, 0, 1, 2, 9}, false), " ab\xe2\x98\x83\n\n");
  EXPECT_EQ(tokenizer->token_to_piece(3, false), " ");
}

}  // namespace
}  // namespace kestrel
