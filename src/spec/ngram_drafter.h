// Prompt lookup (n-gram) drafting: the last n tokens of a request are looked up earlier in its own
// prompt and output, and the tokens that followed the most recent earlier occurrence are proposed.
// No model runs; it pays on input-grounded output (edits of a given file, quotes from a document).
#pragma once

#include "spec/drafter.h"

namespace kestrel {

class NgramDrafter final : public Drafter {
 public:
  // Tries match lengths from max_ngram down to min_ngram (longest first).
  NgramDrafter(int min_ngram, int max_ngram);

  void propose(std::span<const DraftQuery> queries, std::span<DraftProposal> out) override;
  void release(RequestId) override {}
  double cost_seconds(int64_t, int) const override { return 0.0; }
  const char* name() const override { return "ngram"; }

  // The lookup for one token sequence (exposed for tests).
  std::vector<TokenId> lookup(std::span<const TokenId> tokens, int max_drafts) const;

 private:
  int min_ngram_;
  int max_ngram_;
};

}  // namespace kestrel
