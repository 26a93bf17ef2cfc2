// Bad vocabularies, GGUF files and tiktoken files give a kestrel::Error that says what is wrong.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "loader/gguf_reader.h"
#include "loader/gguf_writer.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

using gguf::GgufWriter;
using gguf::Value;
using gguf::ValueType;

// Runs `action`, expecting a kestrel::Error whose message contains every one of `parts`.
template <typename Action>
void expect_error(Action&& action, const std::vector<std::string>& parts) {
  try {
    action();
    ADD_FAILURE() << "no error; expected one mentioning '" << parts.front() << "'";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "message: " << message << "\nmissing: " << part;
    }
  }
}

VocabData small_spm_vocab() {
  VocabData vocab;
  vocab.kind = VocabKind::SentencePiece;
  vocab.tokens = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b"};
  vocab.scores = {0, 0, 0, -1, -2, -3};
  vocab.types = {TokenType::Unknown, TokenType::Control, TokenType::Control,
                 TokenType::Normal,  TokenType::Normal,  TokenType::Normal};
  vocab.unk_id = 0;
  vocab.bos_id = 1;
  vocab.eos_id = 2;
  vocab.add_bos = true;
  return vocab;
}

TEST(TokenizerErrors, BadVocabData) {
  ASSERT_NO_THROW(Tokenizer::create(small_spm_vocab()));

  VocabData empty;
  expect_error([&] { Tokenizer::create(empty); }, {"no tokens"});

  VocabData scores = small_spm_vocab();
  scores.scores.pop_back();
  expect_error([&] { Tokenizer::create(scores); }, {"5 scores for 6 tokens"});

  VocabData types = small_spm_vocab();
  types.types.push_back(TokenType::Normal);
  expect_error([&] { Tokenizer::create(types); }, {"7 token types for 6 tokens"});

  VocabData bad_type = small_spm_vocab();
  bad_type.types[4] = TokenType(9);
  expect_error([&] { Tokenizer::create(bad_type); }, {"token 4 'a'", "unknown token type 9"});

  VocabData bos = small_spm_vocab();
  bos.bos_id = 6;
  expect_error([&] { Tokenizer::create(bos); }, {"bos_id 6 is out of range", "6 tokens"});

  VocabData eot = small_spm_vocab();
  eot.eot_id = -7;
  expect_error([&] { Tokenizer::create(eot); }, {"eot_id -7 is out of range"});

  VocabData no_bos = small_spm_vocab();
  no_bos.bos_id = -1;
  expect_error([&] { Tokenizer::create(no_bos); }, {"add_bos", "no BOS"});

  VocabData byte = small_spm_vocab();
  byte.tokens[5] = "<0xZZ>";
  byte.types[5] = TokenType::Byte;
  expect_error([&] { Tokenizer::create(byte); }, {"token 5 '<0xZZ>'", "<0xNN>"});
}

TEST(TokenizerErrors, BadIds) {
  const auto tokenizer = Tokenizer::create(small_spm_vocab());
  expect_error([&] { tokenizer->token_to_piece(6, false); }, {"token id 6 is out of range"});
  expect_error([&] { tokenizer->token_to_piece(-1, false); }, {"token id -1 is out of range"});
  const std::vector<TokenId> ids = {4, 99};
  expect_error([&] { tokenizer->decode(ids, false); }, {"token id 99 is out of range"});
  StreamingDetokenizer stream(*tokenizer);
  expect_error([&] { stream.push(1000); }, {"token id 1000 is out of range"});
}

TEST(TokenizerErrors, SpmWithoutByteTokensOrUnknown) {
  VocabData vocab = small_spm_vocab();
  const auto with_unk = Tokenizer::create(vocab);
  EXPECT_EQ(with_unk->encode("ac", false, false), (std::vector<TokenId>{3, 4, 0}))
      << "a character with no token and no byte token becomes <unk>";
  vocab.unk_id = -1;
  const auto without_unk = Tokenizer::create(vocab);
  expect_error([&] { without_unk->encode("ac", false, false); }, {"cannot encode byte 0x63"});
}

VocabData small_bpe_vocab() {
  VocabData vocab;
  vocab.kind = VocabKind::BytePairEncoding;
  vocab.pre = "gpt-2";
  vocab.tokens = {"a", "b", "ab"};
  vocab.merges = {"a b"};
  return vocab;
}

TEST(TokenizerErrors, BadMergesAndPre) {
  ASSERT_NO_THROW(Tokenizer::create(small_bpe_vocab()));

  VocabData no_space = small_bpe_vocab();
  no_space.merges = {"ab"};
  expect_error([&] { Tokenizer::create(no_space); }, {"merges entry 0 'ab'", "'left right'"});

  VocabData trailing = small_bpe_vocab();
  trailing.merges = {"a b", "a "};
  expect_error([&] { Tokenizer::create(trailing); }, {"merges entry 1 'a '"});

  VocabData unknown_part = small_bpe_vocab();
  unknown_part.merges = {"a x"};
  expect_error([&] { Tokenizer::create(unknown_part); }, {"merges entry 0 'a x'", "'x' is not a token"});

  VocabData pre = small_bpe_vocab();
  pre.pre = "no-such-pre";
  expect_error([&] { Tokenizer::create(pre); }, {"unknown BPE pre-tokenizer 'no-such-pre'"});
}

// A GGUF holding only tokenizer metadata, written to a scratch file.
class GgufVocab {
 public:
  GgufVocab() {
    writer.set_string("general.architecture", "llama");
    writer.set_string("tokenizer.ggml.model", "llama");
    writer.set("tokenizer.ggml.tokens", strings({"<unk>", "<s>", "</s>", "\xe2\x96\x81" "a", "a"}));
    writer.set("tokenizer.ggml.scores", floats({0, 0, 0, -1, -2}));
    writer.set("tokenizer.ggml.token_type", ints({2, 3, 3, 1, 1}));
  }
  static Value strings(const std::vector<std::string>& items) {
    std::vector<Value> values;
    for (const auto& item : items) values.push_back(Value::of_string(item));
    return Value::of_array(ValueType::String, values);
  }
  static Value floats(const std::vector<float>& items) {
    std::vector<Value> values;
    for (const float item : items) values.push_back(Value::of_f32(item));
    return Value::of_array(ValueType::Float32, values);
  }
  static Value ints(const std::vector<int32_t>& items) {
    std::vector<Value> values;
    for (const int32_t item : items) values.push_back(Value::of_i32(item));
    return Value::of_array(ValueType::Int32, values);
  }
  std::unique_ptr<Tokenizer> load() {
    const std::string path = test::scratch_dir("tokenizer_errors") + "/vocab.gguf";
    writer.write(path);
    return Tokenizer::from_gguf(*gguf::GgufFile::open(path));
  }
  GgufWriter writer;
};

TEST(TokenizerErrors, GgufGood) {
  GgufVocab file;
  const auto tokenizer = file.load();
  EXPECT_EQ(tokenizer->vocab().kind, VocabKind::SentencePiece);
  EXPECT_EQ(tokenizer->bos_id(), 1);  // llama.cpp's SentencePiece defaults
  EXPECT_EQ(tokenizer->eos_id(), 2);
  EXPECT_TRUE(tokenizer->vocab().add_bos);
  EXPECT_EQ(tokenizer->encode("a", true, false), (std::vector<TokenId>{1, 3}));
}

TEST(TokenizerErrors, GgufMissingKeys) {
  {
    GgufVocab file;
    GgufWriter bare;
    bare.set("tokenizer.ggml.tokens", GgufVocab::strings({"a"}));
    file.writer = bare;
    expect_error([&] { file.load(); }, {"vocab.gguf", "'tokenizer.ggml.model' is missing"});
  }
  {
    GgufVocab file;
    GgufWriter bare;
    bare.set_string("tokenizer.ggml.model", "llama");
    file.writer = bare;
    expect_error([&] { file.load(); }, {"vocab.gguf", "'tokenizer.ggml.tokens' is missing"});
  }
  {
    GgufVocab file;
    file.writer.set_string("tokenizer.ggml.model", "t5");
    expect_error([&] { file.load(); }, {"unsupported tokenizer model 't5'", "'bert' (WordPiece)"});
  }
  {
    GgufVocab file;  // a WordPiece vocabulary too small for BERT's default [UNK] (id 100)
    file.writer.set_string("tokenizer.ggml.model", "bert");
    expect_error([&] { file.load(); }, {"vocab.gguf", "WordPiece vocabulary needs an unknown token"});
  }
  {
    GgufVocab file;
    file.writer.set_string("tokenizer.ggml.model", "gpt2");
    expect_error([&] { file.load(); }, {"'tokenizer.ggml.merges' is missing"});
  }
}

TEST(TokenizerErrors, GgufMalformedArrays) {
  {
    GgufVocab file;
    file.writer.set("tokenizer.ggml.scores", GgufVocab::floats({0, 0}));
    expect_error([&] { file.load(); }, {"'tokenizer.ggml.scores' has 2 items but there are 5 tokens"});
  }
  {
    GgufVocab file;
    file.writer.set("tokenizer.ggml.token_type", GgufVocab::ints({1, 1, 1, 1, 1, 1}));
    expect_error([&] { file.load(); }, {"'tokenizer.ggml.token_type' has 6 items but there are 5 tokens"});
  }
  {
    GgufVocab file;
    file.writer.set("tokenizer.ggml.token_type", GgufVocab::ints({1, 1, 1, 1, 42}));
    expect_error([&] { file.load(); }, {"'tokenizer.ggml.token_type' item 4 is not a token type"});
  }
  {
    GgufVocab file;
    file.writer.set("tokenizer.ggml.tokens", GgufVocab::ints({1, 2, 3, 4, 5}));
    expect_error([&] { file.load(); }, {"'tokenizer.ggml.tokens' item 0 should be a string"});
  }
  {
    GgufVocab file;
    file.writer.set_u32("tokenizer.ggml.eos_token_id", 77);
    expect_error([&] { file.load(); }, {"vocab.gguf", "eos_id 77 is out of range"});
  }
  {
    GgufVocab file;
    file.writer.set_string("tokenizer.ggml.model", "gpt2");
    file.writer.set_string("tokenizer.ggml.pre", "gpt-2");
    file.writer.set("tokenizer.ggml.merges", GgufVocab::strings({"a"}));
    expect_error([&] { file.load(); }, {"vocab.gguf", "merges entry 0 'a'"});
  }
}

std::string write_tiktoken(const std::string& name, const std::string& contents) {
  const std::string path = test::scratch_dir("tokenizer_tiktoken_" + name) + "/tokenizer.model";
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

// The 256 single bytes as ranks 0-255, base64-encoded, as a tiktoken file begins.
std::string byte_ranks() {
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (int b = 0; b < 256; ++b) {
    out += digits[b >> 2];
    out += digits[(b & 3) << 4];
    out += "== " + std::to_string(b) + "\n";
  }
  return out;
}

TEST(TokenizerErrors, TiktokenFiles) {
  // "ab", "bc", "abc" after the bytes: YWI= YmM= YWJj.
  const std::string good = byte_ranks() + "YWI= 256\nYmM= 257\nYWJj 258\n";
  const auto tokenizer = Tokenizer::from_tiktoken_llama3(write_tiktoken("good", good));
  EXPECT_EQ(tokenizer->vocab_size(), 259 + 256);
  EXPECT_EQ(tokenizer->bos_id(), 259);
  EXPECT_EQ(tokenizer->find_token("<|eot_id|>"), 268);
  EXPECT_TRUE(tokenizer->is_end_of_generation(268));
  EXPECT_EQ(tokenizer->encode("abc", false, false), std::vector<TokenId>{258}) << "whole word";
  // "xabc": a+b (rank 256) merges before b+c (257), then ab+c forms abc (258).
  EXPECT_EQ(tokenizer->encode("xabc", false, false), (std::vector<TokenId>{'x', 258}));
  EXPECT_EQ(tokenizer->encode("bca", false, false), (std::vector<TokenId>{257, 'a'}));
  EXPECT_EQ(tokenizer->encode("ab", true, false), (std::vector<TokenId>{259, 256}));

  expect_error([&] { Tokenizer::from_tiktoken_llama3("/nonexistent/tokenizer.model"); },
               {"/nonexistent/tokenizer.model", "cannot open"});
  expect_error([&] { Tokenizer::from_tiktoken_llama3(write_tiktoken("norank", byte_ranks() + "YWI=\n")); },
               {"tokenizer.model:257", "expected '<base64 token> <rank>'"});
  expect_error([&] { Tokenizer::from_tiktoken_llama3(write_tiktoken("badrank", byte_ranks() + "YWI= 2x\n")); },
               {"tokenizer.model:257", "bad rank '2x'"});
  expect_error([&] { Tokenizer::from_tiktoken_llama3(write_tiktoken("b64", byte_ranks() + "Y*I= 256\n")); },
               {"tokenizer.model:257", "bad base64 token 'Y*I='"});
  expect_error([&] { Tokenizer::from_tiktoken_llama3(write_tiktoken("b64len", byte_ranks() + "YWI 256\n")); },
               {"bad base64 token 'YWI'"});
  expect_error([&] { Tokenizer::from_tiktoken_llama3(write_tiktoken("twice", byte_ranks() + "YWI= 5\n")); },
               {"rank 5 appears twice"});
  expect_error([&] { Tokenizer::from_tiktoken_llama3(write_tiktoken("gap", byte_ranks() + "YWI= 300\n")); },
               {"rank 256 is missing"});
  expect_error([&] { Tokenizer::from_tiktoken_llama3(write_tiktoken("empty", "")); }, {"no tokens"});
}

}  // namespace
}  // namespace kestrel
