// llama.cpp's tokenizer test vectors (test-tokenizer-0): every string must encode to exactly the
// ids llama.cpp produces, and those ids must decode back to the string. (The .inp files hold 46
// strings, each followed by the separator; SOURCES.md's "47" counts the empty tail after the last.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "loader/gguf_reader.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

struct VectorCase {
  std::string text;
  std::vector<TokenId> ids;
};

// .inp: strings each followed by "\n__ggml_vocab_test__\n" (in gemma-4's, the last string has no
// separator after it). .out: one line of ids per string.
std::vector<VectorCase> load_vectors(const std::string& name) {
  const std::string inp = test::read_file(test::shared_model_path("llama.cpp-vocab/" + name + ".inp"));
  const std::string out = test::read_file(test::shared_model_path("llama.cpp-vocab/" + name + ".out"));
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<VectorCase> cases;
  size_t pos = 0;
  while (pos < inp.size()) {
    const size_t end = inp.find(separator, pos);
    if (end == std::string::npos) {
      cases.push_back({inp.substr(pos), {}});
      break;
    }
    cases.push_back({inp.substr(pos, end - pos), {}});
    pos = end + separator.size();
  }
  std::istringstream lines(out);
  std::string line;
  size_t index = 0;
  while (std::getline(lines, line)) {
    if (index >= cases.size()) {
      ADD_FAILURE() << name << ".out has more lines than .inp has strings";
      break;
    }
    std::istringstream ids(line);
    TokenId id;
    while (ids >> id) cases[index].ids.push_back(id);
    ++index;
  }
  EXPECT_EQ(index, cases.size()) << name << ": .out lines vs .inp strings";
  return cases;
}

const Tokenizer& gguf_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) {
    const auto file = gguf::GgufFile::open(test::shared_model_path("llama.cpp-vocab/" + name));
    slot = Tokenizer::from_gguf(*file);
  }
  return *slot;
}

const Tokenizer& llama3_tokenizer() {
  static const std::unique_ptr<Tokenizer> tokenizer =
      Tokenizer::from_tiktoken_llama3(test::shared_model_path("llama3/tokenizer.model"));
  return *tokenizer;
}

std::string ids_to_string(const std::vector<TokenId>& ids) {
  std::string s;
  for (const TokenId id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

// Runs every vector; reports each mismatch and the pass count.
void check_vectors(const Tokenizer& tokenizer, const std::string& vectors_name) {
  const std::vector<VectorCase> cases = load_vectors(vectors_name);
  ASSERT_EQ(cases.size(), 46u);
  int encode_passes = 0;
  int decode_passes = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const VectorCase& c = cases[i];
    const std::vector<TokenId> ids = tokenizer.encode(c.text, /*add_special=*/false,
                                                      /*parse_special=*/false);
    if (ids == c.ids) {
      ++encode_passes;
    } else {
      ADD_FAILURE() << vectors_name << " case " << i << " '" << c.text << "'\n  got:      "
                    << ids_to_string(ids) << "\n  expected: " << ids_to_string(c.ids);
    }
    const std::string decoded = tokenizer.decode(c.ids, /*render_special=*/false);
    if (decoded == c.text) {
      ++decode_passes;
    } else {
      ADD_FAILURE() << vectors_name << " case " << i << " decodes to '" << decoded
                    << "' instead of '" << c.text << "'";
    }
  }
  std::printf("%s: encode %d/%zu, decode %d/%zu\n", vectors_name.c_str(), encode_passes,
              cases.size(), decode_passes, cases.size());
}

TEST(TokenizerVectors, LlamaSpm) {
  check_vectors(gguf_tokenizer("ggml-vocab-llama-spm.gguf"), "ggml-vocab-llama-spm.gguf");
}

TEST(TokenizerVectors, Gpt2) {
  check_vectors(gguf_tokenizer("ggml-vocab-gpt-2.gguf"), "ggml-vocab-gpt-2.gguf");
}

TEST(TokenizerVectors, Llama3Tiktoken) {
  check_vectors(llama3_tokenizer(), "ggml-vocab-llama-bpe.gguf");
}

// Every llama.cpp vocab file in ../shared/models/llama.cpp-vocab, found by listing the folder so
// that a file added there is tested too: each string must encode to exactly llama.cpp's ids. Prints
// one line per vocab; the expected ids must also decode back to the string. Files of a tokenizer kind Kestrel does not have are listed in kUnsupported
// with the reason, and must still fail to load (so the list is kept honest).
TEST(TokenizerVectors, EveryLlamaCppVocab) {
  const std::map<std::string, std::string> kUnsupported = {};
  std::vector<std::string> names;
  for (const auto& entry :
       std::filesystem::directory_iterator(test::shared_model_path("llama.cpp-vocab"))) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".gguf")) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  ASSERT_GE(names.size(), 15u);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const auto file = gguf::GgufFile::open(test::shared_model_path("llama.cpp-vocab/" + name));
    if (const auto reason = kUnsupported.find(name); reason != kUnsupported.end()) {
      EXPECT_THROW(Tokenizer::from_gguf(*file), Error);
      std::printf("%-34s not tested: %s\n", name.c_str(), reason->second.c_str());
      continue;
    }
    const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::from_gguf(*file);
    const std::vector<VectorCase> cases = load_vectors(name);
    ASSERT_FALSE(cases.empty());
    size_t encode_passes = 0;
    size_t decode_passes = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const VectorCase& c = cases[i];
      const std::vector<TokenId> ids = tokenizer->encode(c.text, false, false);
      if (ids == c.ids) {
        ++encode_passes;
      } else {
        ADD_FAILURE() << name << " case " << i << " '" << c.text << "'\n  got:      "
                      << ids_to_string(ids) << "\n  expected: " << ids_to_string(c.ids);
      }
      const std::string decoded = tokenizer->decode(c.ids, false);
      if (tokenizer->vocab().kind == VocabKind::WordPiece) {
        // BERT's normaliser lowercases and strips accents, so the text cannot come back; what
        // must hold is that the decoded text encodes to the same ids (unless a word was [UNK],
        // which decodes to nothing).
        const bool has_unknown = std::find(c.ids.begin(), c.ids.end(), tokenizer->vocab().unk_id) != c.ids.end();
        if (has_unknown || tokenizer->encode(decoded, false, false) == c.ids) {
          ++decode_passes;
        } else {
          ADD_FAILURE() << name << " case " << i << " decodes to '" << decoded << "', which encodes to "
                        << ids_to_string(tokenizer->encode(decoded, false, false));
        }
      } else if (decoded == c.text) {
        ++decode_passes;
      } else {
        ADD_FAILURE() << name << " case " << i << " decodes to '" << decoded << "' instead of '"
                      << c.text << "'";
      }
    }
    const VocabKind kind = tokenizer->vocab().kind;
    std::printf("%-34s pre %-15s encode %zu/%zu, decode %zu/%zu\n", name.c_str(),
                kind == VocabKind::SentencePiece ? "(spm)"
                : kind == VocabKind::WordPiece   ? "(wordpiece)"
                                                 : tokenizer->vocab().pre.c_str(),
                encode_passes, cases.size(), decode_passes, cases.size());
  }
}

TEST(TokenizerVectors, AddSpecial) {
  const Tokenizer& spm = gguf_tokenizer("ggml-vocab-llama-spm.gguf");
  EXPECT_TRUE(spm.vocab().add_bos);
  EXPECT_EQ(spm.encode("", true, false), std::vector<TokenId>{1});
  EXPECT_EQ(spm.encode("", false, false), std::vector<TokenId>{});
  EXPECT_EQ(spm.encode("Hello world", true, false), (std::vector<TokenId>{1, 15043, 3186}));
  EXPECT_EQ(spm.decode(std::vector<TokenId>{1, 15043, 3186}, false), "Hello world");

  const Tokenizer& llama3 = llama3_tokenizer();
  const std::vector<TokenId> ids = llama3.encode("Hello world", true, false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 128000);
  EXPECT_EQ(std::vector<TokenId>(ids.begin() + 1, ids.end()), llama3.encode("Hello world", false, false));

  const Tokenizer& gpt2 = gguf_tokenizer("ggml-vocab-gpt-2.gguf");
  EXPECT_EQ(gpt2.encode("Hello world", true, false), gpt2.encode("Hello world", false, false))
      << "GPT-2 adds no BOS";
}

// BERT's WordPiece (bert-bge): [CLS] ... [SEP] around the text with add_special; [CLS] typed in
// the text is that token only when parsing specials; decoding follows llama.cpp's detokenize
// (a space before each word, none before . , ! ? or in " 's"; control tokens hidden unless rendered).
TEST(TokenizerWordPiece, SpecialTokensAndDecode) {
  const Tokenizer& bert = gguf_tokenizer("ggml-vocab-bert-bge.gguf");
  EXPECT_EQ(bert.vocab().kind, VocabKind::WordPiece);
  EXPECT_EQ(bert.encode("Hello world", true, false), (std::vector<TokenId>{101, 7592, 2088, 102}));
  EXPECT_EQ(bert.encode("Hello world", false, false), (std::vector<TokenId>{7592, 2088}));
  EXPECT_EQ(bert.encode("[CLS] hello", false, true), (std::vector<TokenId>{101, 7592}));
  EXPECT_NE(bert.encode("[CLS] hello", false, false).front(), 101);
  const std::vector<TokenId> ids = bert.encode("Hello, world! It's here.", true, false);
  EXPECT_EQ(bert.decode(ids, false), " hello, world! it's here.");
  EXPECT_EQ(bert.decode(ids, true), "[CLS] hello, world! it's here.[SEP]");
  // A word with a character no piece covers is one [UNK]; accents are stripped, case folded.
  EXPECT_EQ(bert.encode("\xe2\x98\x83", false, false), std::vector<TokenId>{100});
  EXPECT_EQ(bert.encode("\xc3\x84PFEL", false, false), bert.encode("apfel", false, false));
}

TEST(TokenizerSpecial, SpmParseSpecial) {
  const Tokenizer& spm = gguf_tokenizer("ggml-vocab-llama-spm.gguf");
  const std::vector<TokenId> parsed = spm.encode("<s>hello</s>", false, true);
  ASSERT_GE(parsed.size(), 3u);
  EXPECT_EQ(parsed.front(), 1);
  EXPECT_EQ(parsed.back(), 2);
  // llama.cpp puts SentencePiece's dummy space in front of text that follows a special token.
  EXPECT_EQ(std::vector<TokenId>(parsed.begin() + 1, parsed.end() - 1), spm.encode("hello", false, false));
  EXPECT_EQ(spm.decode(parsed, true), "<s>hello</s>");
  EXPECT_EQ(spm.decode(parsed, false), "hello");

  const std::vector<TokenId> literal = spm.encode("<s>hello</s>", false, false);
  EXPECT_EQ(std::count(literal.begin(), literal.end(), 1), 0);
  EXPECT_EQ(std::count(literal.begin(), literal.end(), 2), 0);
  EXPECT_EQ(spm.decode(literal, false), "<s>hello</s>");
}

TEST(TokenizerSpecial, Llama3ParseSpecial) {
  const Tokenizer& llama3 = llama3_tokenizer();
  const std::vector<TokenId> parsed = llama3.encode("<|begin_of_text|>hi<|eot_id|>", false, true);
  ASSERT_EQ(parsed.size(), 3u);
  EXPECT_EQ(parsed[0], 128000);
  EXPECT_EQ(parsed[1], llama3.find_token("hi"));
  EXPECT_EQ(parsed[2], 128009);
  EXPECT_EQ(llama3.decode(parsed, true), "<|begin_of_text|>hi<|eot_id|>");
  EXPECT_EQ(llama3.decode(parsed, false), "hi");

  const std::vector<TokenId> literal = llama3.encode("<|begin_of_text|>hi<|eot_id|>", false, false);
  EXPECT_GT(literal.size(), 3u);
  for (const TokenId id : literal) EXPECT_LT(id, 128000);
  EXPECT_EQ(llama3.decode(literal, false), "<|begin_of_text|>hi<|eot_id|>");

  EXPECT_EQ(llama3.vocab_size(), 128256);
  EXPECT_EQ(llama3.find_token("<|start_header_id|>"), 128006);
  EXPECT_EQ(llama3.find_token("<|end_header_id|>"), 128007);
  EXPECT_EQ(llama3.find_token("<|reserved_special_token_5|>"), 128010);
  EXPECT_EQ(llama3.find_token("<|reserved_special_token_250|>"), 128255);
  EXPECT_TRUE(llama3.is_end_of_generation(128001));
  EXPECT_TRUE(llama3.is_end_of_generation(128009));
  EXPECT_FALSE(llama3.is_end_of_generation(128000));
}

TEST(TokenizerSpecial, Gpt2EndOfText) {
  const Tokenizer& gpt2 = gguf_tokenizer("ggml-vocab-gpt-2.gguf");
  const TokenId eot = gpt2.find_token("<|endoftext|>");
  ASSERT_GE(eot, 0);
  EXPECT_EQ(gpt2.encode("a<|endoftext|>b", false, true),
            (std::vector<TokenId>{gpt2.find_token("a"), eot, gpt2.find_token("b")}));
  EXPECT_TRUE(gpt2.is_end_of_generation(gpt2.eos_id()));
}

TEST(TokenizerStories, VocabRoundTrip) {
  const auto file = gguf::GgufFile::open(test::shared_model_path("stories260K.gguf"));
  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::from_gguf(*file);
  EXPECT_EQ(tokenizer->vocab_size(), 512);
  EXPECT_EQ(tokenizer->vocab().kind, VocabKind::SentencePiece);
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_id(), 2);
  const std::vector<TokenId> ids = tokenizer->encode("Once upon a time", true, false);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(tokenizer->decode(ids, false), "Once upon a time");
  // The llama2.c reference generation from BOS starts with these ids and this text (SOURCES.md).
  const std::vector<TokenId> generated = {
      1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395,
      317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265,
      282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432};
  const std::string reference =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park. One day, she saw a big, red ball.";
  const std::string decoded = tokenizer->decode(generated, false);
  EXPECT_GT(decoded.size(), 60u);
  EXPECT_EQ(reference.substr(0, decoded.size()), decoded);
}

}  // namespace
}  // namespace kestrel
