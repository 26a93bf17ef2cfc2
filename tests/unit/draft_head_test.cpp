// A draft model's head over part of the vocabulary (spec/draft_head.h) and the vocabulary's own
// frequency order (tokens_by_frequency): the subset's logits are bitwise the whole head's at
// those ids, whatever order the rows were added in; a scattered row is -infinity elsewhere; the
// set grows with the tokens fed and never repeats one; control and unused tokens are never ranked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "backend/backend.h"
#include "core/error.h"
#include "quant/format.h"
#include "spec/draft_head.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

struct QuantizedMatrix {
  std::vector<uint8_t> bytes;
  WeightView view;
};

// rows x cols random values in Q8_0 (a block format: rows are copied as whole blocks).
QuantizedMatrix random_q8_0(int64_t rows, int64_t cols, uint32_t seed) {
  const quant::WeightFormat& f = quant::require_format(DType::Q8_0);
  const int64_t row_bytes = quant::row_bytes(f, cols);
  QuantizedMatrix m;
  m.bytes.resize(size_t(rows * row_bytes));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = normal(rng);
    f.quantize_row(row.data(), m.bytes.data() + r * row_bytes, cols);
  }
  m.view = WeightView{DType::Q8_0, rows, cols, m.bytes.data()};
  return m;
}

TEST(DraftHead, SubsetLogitsAreTheWholeHeadsAtThoseIds) {
  const int64_t n_vocab = 301, n_embd = 96, n_tokens = 3;
  const QuantizedMatrix output = random_q8_0(n_vocab, n_embd, 7);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(size_t(n_tokens * n_embd));
  for (float& v : x) v = normal(rng);
  auto backend = make_cpu_backend(2);
  std::vector<float> whole(size_t(n_tokens * n_vocab));
  backend->matmul(output.view, x.data(), n_tokens, whole.data());

  const std::vector<TokenId> first = {300, 0, 17, 5, 17};
  DraftHead head(output.view, first);
  ASSERT_EQ(head.size(), 4);  // 17 once
  head.add(std::vector<TokenId>{42, 5, 299, 42});
  ASSERT_EQ(head.size(), 6);
  const std::vector<TokenId> expected_ids = {300, 0, 17, 5, 42, 299};
  ASSERT_EQ(std::vector<TokenId>(head.ids().begin(), head.ids().end()), expected_ids);
  EXPECT_EQ(head.view().rows, 6);
  EXPECT_EQ(head.view().cols, n_embd);

  std::vector<float> subset(size_t(n_tokens * head.size()));
  backend->matmul(head.view(), x.data(), n_tokens, subset.data());
  std::vector<float> full(static_cast<size_t>(n_vocab));
  for (int64_t t = 0; t < n_tokens; ++t) {
    head.scatter(std::span<const float>(subset).subspan(size_t(t * head.size()), size_t(head.size())), full);
    for (int64_t v = 0; v < n_vocab; ++v) {
      const bool kept = std::find(expected_ids.begin(), expected_ids.end(), TokenId(v)) != expected_ids.end();
      if (kept) {
        EXPECT_EQ(full[size_t(v)], whole[size_t(t * n_vocab + v)]) << "token " << t << " id " << v;
      } else {
        EXPECT_EQ(full[size_t(v)], -std::numeric_limits<float>::infinity()) << "token " << t << " id " << v;
      }
    }
  }
}

TEST(DraftHead, TokensOutsideTheVocabularyAreAnError) {
  const QuantizedMatrix output = random_q8_0(64, 32, 3);
  EXPECT_THROW(DraftHead(output.view, std::vector<TokenId>{64}), Error);
  EXPECT_THROW(DraftHead(output.view, std::vector<TokenId>{}), Error);
  DraftHead head(output.view, std::vector<TokenId>{1});
  EXPECT_THROW(head.add(std::vector<TokenId>{-1}), Error);
  std::vector<float> wrong(63);
  EXPECT_THROW(head.scatter(std::vector<float>{0.0f}, wrong), Error);
}

TEST(DraftHead, KeepsTheMostFrequentTokensAndTheStopTokens) {
  const std::vector<TokenId> by_frequency = {9, 3, 7, 1, 8};
  const std::vector<TokenId> stop = {20, 7};
  EXPECT_EQ(draft_head_tokens(by_frequency, 3, stop), (std::vector<TokenId>{3, 7, 9, 20}));
  EXPECT_EQ(draft_head_tokens(by_frequency, 100, {}), (std::vector<TokenId>{1, 3, 7, 8, 9}));
  EXPECT_EQ(draft_head_tokens(by_frequency, 0, stop), (std::vector<TokenId>{7, 20}));
}

TEST(TokensByFrequency, SentencePieceByScoreBpeByMergeOrderWithoutControlTokens) {
  VocabData spm;
  spm.kind = VocabKind::SentencePiece;
  spm.tokens = {"<unk>", "<s>", "</s>", "a", "b", "c", "<unused0>", "d"};
  spm.scores = {0.0f, 0.0f, 0.0f, -5.0f, -1.0f, -3.0f, 0.0f, -1.0f};
  spm.types = {TokenType::Unknown, TokenType::Control, TokenType::Control, TokenType::Normal,
               TokenType::Normal,  TokenType::Normal,  TokenType::Unused,  TokenType::Normal};
  // -1 (b, d: id order among equals), -3 (c), -5 (a).
  EXPECT_EQ(tokens_by_frequency(spm), (std::vector<TokenId>{4, 7, 5, 3}));

  VocabData bpe;
  bpe.kind = VocabKind::BytePairEncoding;
  bpe.tokens = {"!", "\"", "th", "the", "<|endoftext|>", "<|im_start|>"};
  bpe.types = {TokenType::Normal, TokenType::Normal, TokenType::Normal, TokenType::Normal,
               TokenType::Control, TokenType::UserDefined};
  EXPECT_EQ(tokens_by_frequency(bpe), (std::vector<TokenId>{0, 1, 2, 3, 5}));
  bpe.types.clear();  // no types: every token is text
  EXPECT_EQ(tokens_by_frequency(bpe).size(), 6u);
}

}  // namespace
}  // namespace kestrel
