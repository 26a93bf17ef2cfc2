// A draft model's output head over part of the vocabulary: the rows of its most frequent tokens
// (FR-Spec, Zhao et al. 2025). With a large vocabulary the head is a big share of a small draft's
// step (Qwen2.5-0.5B: 136M of its 494M parameters, 151,936 rows), yet a few tens of thousands of
// tokens cover nearly all of what it proposes. Drafting over that subset costs the head's share
// only for the rows kept; the target still verifies against its whole vocabulary, so the output is
// unchanged: a token outside the subset is simply never drafted (the target's own token follows).
// The set grows with use: every token the draft is fed (prompts, accepted output) joins it, so the
// identifiers and words of the texts being written are drafted even when rare in general.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"

namespace kestrel {

using TokenId = int32_t;

class DraftHead {
 public:
  // Copies the rows `ids` (each < output.rows; any order, repeats ignored) of `output`
  // [n_vocab][n_embd] into a matrix of its own. `output` must outlive the head (rows are added
  // from it later).
  DraftHead(const WeightView& output, std::span<const TokenId> ids);
  DraftHead(const DraftHead&) = delete;
  DraftHead& operator=(const DraftHead&) = delete;

  // Adds the rows of the tokens not yet in the set (ids outside the vocabulary are an error).
  void add(std::span<const TokenId> tokens);

  // The subset head, [size()][n_embd] (ForwardBatch::head). The object stays the same as tokens are
  // added (its rows and data change).
  const WeightView& view() const { return view_; }
  int64_t size() const { return int64_t(ids_.size()); }
  std::span<const TokenId> ids() const { return ids_; }
  // A whole-vocabulary logits row from a subset row: full[ids[j]] = subset[j], every other entry
  // -infinity (probability 0). subset: [size()], full: [n_vocab].
  void scatter(std::span<const float> subset, std::span<float> full) const;

 private:
  WeightView output_;
  int64_t row_bytes_ = 0;
  std::vector<TokenId> ids_;     // [size()] the token of each row
  std::vector<bool> in_set_;     // [n_vocab]
  std::vector<uint8_t> rows_;    // [size()][row_bytes_]
  WeightView view_;
};

// The ids a draft head starts with: the `count` most frequent text tokens (tokens_by_frequency in
// tokenizer/tokenizer.h, given as `by_frequency`) and every id of `always` (the stop tokens, so
// that drafts can end a reply), ascending.
std::vector<TokenId> draft_head_tokens(std::span<const TokenId> by_frequency, int64_t count,
                                       std::span<const TokenId> always);

}  // namespace kestrel
