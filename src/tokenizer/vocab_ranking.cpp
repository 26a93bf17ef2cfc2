// tokens_by_frequency: the vocabulary's own frequency order (SentencePiece scores, BPE merge order).
#include <algorithm>
#include <numeric>

#include "tokenizer/tokenizer.h"

namespace kestrel {

std::vector<TokenId> tokens_by_frequency(const VocabData& vocab) {
  const TokenId n = TokenId(vocab.tokens.size());
  std::vector<TokenId> ids;
  ids.reserve(size_t(n));
  for (TokenId id = 0; id < n; ++id) {
    const TokenType type = vocab.types.empty() ? TokenType::Normal : vocab.types[size_t(id)];
    if (type == TokenType::Normal || type == TokenType::Byte || type == TokenType::UserDefined) ids.push_back(id);
  }
  const bool by_score = vocab.kind == VocabKind::SentencePiece && vocab.scores.size() == vocab.tokens.size();
  if (by_score) {
    // Byte pieces (<0x41>) carry score 0 in most SentencePiece models; they are fallbacks, ranked
    // by their score like the rest. stable_sort keeps id order among equal scores.
    std::stable_sort(ids.begin(), ids.end(),
                     [&](TokenId a, TokenId b) { return vocab.scores[size_t(a)] > vocab.scores[size_t(b)]; });
  }
  return ids;
}

}  // namespace kestrel
