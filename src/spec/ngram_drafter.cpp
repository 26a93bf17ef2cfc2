#include "spec/ngram_drafter.h"

#include <algorithm>

#include "core/error.h"

namespace kestrel {

NgramDrafter::NgramDrafter(int min_ngram, int max_ngram) : min_ngram_(min_ngram), max_ngram_(max_ngram) {
  if (min_ngram < 1 || max_ngram < min_ngram) {
    fail("n-gram drafting needs 1 <= min n-gram <= max n-gram, got {} and {}", min_ngram, max_ngram);
  }
}

std::vector<TokenId> NgramDrafter::lookup(std::span<const TokenId> tokens, int max_drafts) const {
  const int64_t len = int64_t(tokens.size());
  if (max_drafts <= 0) return {};
  for (int n = std::min<int64_t>(max_ngram_, len - 1); n >= min_ngram_; --n) {
    const auto pattern = tokens.subspan(size_t(len - n));
    // The most recent earlier occurrence: [start, start + n) with start + n < len.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(pattern.begin(), pattern.end(), tokens.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t count = std::min<int64_t>(max_drafts, len - from);
      return {tokens.begin() + from, tokens.begin() + from + count};
    }
  }
  return {};
}

void NgramDrafter::propose(std::span<const DraftQuery> queries, std::span<DraftProposal> out) {
  for (size_t i = 0; i < queries.size(); ++i) {
    out[i].tokens = lookup(queries[i].tokens, queries[i].max_drafts);
    out[i].dists.clear();
  }
}

}  // namespace kestrel
